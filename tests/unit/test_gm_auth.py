"""Node token tables and the TokenReview verdicts, without a network (the hub tests cover HTTP)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gm.config import parse_config
from gm.edge.auth import (
    AuthConfigError,
    FileTable,
    NodeAuth,
    NodeMismatch,
    NodeTokens,
    NodeTokenTable,
    TokenReviewAuth,
    Unauthenticated,
)
from gm.errors import ConfigError
from gm.kube.tokenreview import NODE_NAME_EXTRA, TokenReviewResult, parse_review, review_body

TOKEN_1 = "a" * 32
TOKEN_2 = "b" * 32


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("[a, b]", "must be a mapping", id="not-a-mapping"),
        pytest.param("short: edge-1", "at least 16 characters", id="short-token"),
        pytest.param(f"{TOKEN_1}: Edge_1", "not a valid node name", id="bad-node"),
        pytest.param(f"{TOKEN_1}: [edge-1]", "not a valid node name", id="node-list"),
        pytest.param("{", "not valid YAML", id="yaml"),
    ],
)
def test_bad_tables_are_refused(text: str, error: str) -> None:
    with pytest.raises(AuthConfigError, match=error):
        NodeTokenTable.parse(text, where="tokens.yaml")


def test_table_maps_each_token_to_one_node() -> None:
    table = NodeTokenTable.parse(f"{TOKEN_1}: edge-1\n{TOKEN_2}: edge-2\n", where="t")
    assert (table.node_of(TOKEN_1), table.node_of(TOKEN_2), table.node_of("c" * 32)) == ("edge-1", "edge-2", None)
    assert len(table) == 2


async def test_file_table_follows_rotation_and_keeps_the_last_good_table(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(f"{TOKEN_1}: edge-1\n")
    auth = NodeAuth([NodeTokens(FileTable(str(path)))])
    assert (await auth.admit("edge-1", f"Bearer {TOKEN_1}")).node == "edge-1"
    path.write_text(f"{TOKEN_2}: edge-1\n")  # rotated: the old token is gone
    os.utime(path, ns=(1, 1))
    with pytest.raises(Unauthenticated):
        await auth.admit("edge-1", f"Bearer {TOKEN_1}")
    assert (await auth.admit("edge-1", f"Bearer {TOKEN_2}")).user == "node-token:edge-1"
    path.write_text("not: [valid")  # a broken edit keeps the last good table
    assert (await auth.admit("edge-1", f"Bearer {TOKEN_2}")).node == "edge-1"
    with pytest.raises(NodeMismatch, match="node edge-1's, not edge-2's"):
        await auth.admit("edge-2", f"Bearer {TOKEN_2}")


def test_missing_table_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match="No such file"):
        FileTable(str(tmp_path / "absent.yaml"))


def answer(node: str | None, *, user: str = "system:serviceaccount:sedna:sedna-lc",
           audiences: tuple[str, ...] = ("sedna-gm",)) -> TokenReviewResult:
    extra = {NODE_NAME_EXTRA: (node,)} if node else {}
    return TokenReviewResult(True, username=user, extra=extra, audiences=audiences)


@pytest.mark.parametrize(
    ("result", "error"),
    [
        pytest.param(answer("edge-2"), "runs on node edge-2, not edge-1", id="other-node"),
        pytest.param(answer(None), "not bound to a pod on a node", id="unbound-token"),
        pytest.param(answer("edge-1", user="system:serviceaccount:default:default"),
                     "may not connect as a LocalController", id="other-service-account"),
    ],
)
async def test_token_review_verdicts(result: TokenReviewResult, error: str) -> None:
    async def review(token: str) -> TokenReviewResult:
        return result
    auth = TokenReviewAuth(review, audiences=("sedna-gm",),
                           usernames=("system:serviceaccount:sedna:sedna-lc",))
    with pytest.raises(NodeMismatch, match=error):
        await auth.authenticate("edge-1", "t")


async def test_token_review_for_other_audiences_is_not_recognized() -> None:
    async def review(token: str) -> TokenReviewResult:
        return answer("edge-1", audiences=("https://kubernetes.default.svc",))
    assert await TokenReviewAuth(review, audiences=("sedna-gm",)).authenticate("edge-1", "t") is None


async def test_token_review_cache_expires() -> None:
    now = [0.0]
    calls: list[str] = []

    async def review(token: str) -> TokenReviewResult:
        calls.append(token)
        return answer("edge-1")
    auth = TokenReviewAuth(review, cache_seconds=10, clock=lambda: now[0])
    for t in (0.0, 9.9, 10.0):
        now[0] = t
        assert (await auth.authenticate("edge-1", "tok")).node == "edge-1"
    assert calls == ["tok", "tok"]


def test_review_wire_format() -> None:
    assert review_body("tok", ["sedna-gm"]) == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": "tok", "audiences": ["sedna-gm"]}}
    assert "audiences" not in review_body("tok")["spec"]
    parsed = parse_review({"status": {"authenticated": True, "audiences": ["sedna-gm"], "user": {
        "username": "u", "groups": ["g"], "extra": {NODE_NAME_EXTRA: ["edge-1"], "bad": "x"}}}})
    assert (parsed.node, parsed.username, parsed.groups, parsed.audiences) == ("edge-1", "u", ("g",), ("sedna-gm",))
    assert parse_review({"status": {"authenticated": "true"}}).authenticated is False
    assert parse_review({}).authenticated is False


@pytest.mark.parametrize(
    ("yaml_text", "error"),
    [
        pytest.param("websocket: {nodeTokens: {secret: just-a-name}}", "must be namespace/name", id="secret-ref"),
        pytest.param("websocket: {tls: {certFile: /x}}", "certFile and keyFile go together", id="tls-pair"),
        pytest.param("websocket: {tls: {certFile: /nope.crt, keyFile: /nope.key}}", "does not exist", id="tls-file"),
        pytest.param("websocket: {nodeTokens: {file: /nope.yaml}}", "does not exist", id="table-file"),
        pytest.param("websocket: {tokenReview: {enabled: yes please}}", "expected bool", id="enabled-type"),
    ],
)
def test_auth_config_errors(yaml_text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config(yaml_text)


def test_auth_config_defaults_are_upstream_compatible() -> None:
    ws = parse_config("").websocket
    assert (ws.token, ws.nodeTokens.file, ws.nodeTokens.secret, ws.tokenReview.enabled, ws.tls.enabled) == (
        "", "", "", False, False)
