"""The token authority without HTTP (expiry on a fake clock, audiences, Secret tokens) and the
protobuf bodies of the reviews (encoded here field by field, as kubectl's typed clients do)."""

from __future__ import annotations

import base64

import pytest

from devcluster.auth.authz import UserInfo
from devcluster.auth.tokenreview import DEFAULT_AUDIENCES, TokenAuthority
from devcluster.machinery.errors import ApiError
from devcluster.server import protobody
from devcluster.storage.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store() -> Store:
    s = Store()
    sas = s.registry.lookup(group="", version="v1", resource="serviceaccounts")
    s.create(sas, "default", {"metadata": {"name": "bot"}})
    return s


def test_token_request_expires(store: Store) -> None:
    clock = Clock()
    authority = TokenAuthority(store, clock=clock)
    answer = authority.request_token("default", "bot", {"spec": {"expirationSeconds": 600}})
    token = answer["status"]["token"]
    assert isinstance(authority.authenticate(token), UserInfo)
    clock.now += 599
    assert isinstance(authority.authenticate(token), UserInfo)
    clock.now += 1
    assert authority.authenticate(token) == "invalid bearer token, service account token has expired"


def test_token_for_other_audiences_does_not_authenticate_to_the_api(store: Store) -> None:
    authority = TokenAuthority(store)
    token = authority.request_token("default", "bot", {"spec": {"audiences": ["sedna-gm"]}})["status"]["token"]
    assert "is invalid for the target audiences" in str(authority.authenticate(token))
    assert isinstance(authority.authenticate(token, ["sedna-gm"]), UserInfo)
    assert DEFAULT_AUDIENCES[0] not in str(authority.authenticate(token, ["sedna-gm"]))


def test_secret_token_is_valid_while_the_secret_holds_it(store: Store) -> None:
    authority = TokenAuthority(store)
    secrets = store.registry.lookup(group="", version="v1", resource="secrets")
    sas = store.registry.lookup(group="", version="v1", resource="serviceaccounts")
    sa = store.get(sas, "default", "bot")
    secret = store.create(secrets, "default", {"metadata": {"name": "t", "annotations": {
        "kubernetes.io/service-account.name": "bot", "kubernetes.io/service-account.uid": sa["metadata"]["uid"]}},
        "type": "kubernetes.io/service-account-token"})
    token = authority.issue_for_secret(secret, sa)
    assert "was replaced" in str(authority.authenticate(token))  # not written into the Secret yet
    store.mutate(secrets, "default", "t", lambda s: s.setdefault("data", {}).update(
        token=base64.b64encode(token.encode()).decode()))
    who = authority.authenticate(token)
    assert isinstance(who, UserInfo) and who.name == "system:serviceaccount:default:bot"
    assert TokenAuthority(store).authenticate(token) == who  # found again from the Secret (a restart)


def test_token_request_needs_the_service_account(store: Store) -> None:
    with pytest.raises(ApiError) as info:
        TokenAuthority(store).request_token("default", "ghost", {"spec": {}})
    assert (info.value.code, info.value.message) == (404, 'serviceaccounts "ghost" not found')


# -- protobuf -------------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return protobody.MAGIC + _field(1, type_meta) + _field(2, raw) + _field(4, "application/vnd.kubernetes.protobuf")


def test_self_subject_access_review_from_protobuf() -> None:
    attrs = _field(1, "apps") + _field(2, "list") + _field(5, "pods") + _field(6, "log") + _field(7, "web")
    raw = _field(1, b"") + _field(2, _field(1, attrs)) + _field(3, b"")
    got = protobody.decode_body(_envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", raw))
    assert got == {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "apps", "verb": "list", "resource": "pods",
                                                   "subresource": "log", "name": "web"}},
                   "status": {}}  # present on the wire, so present (empty) in JSON


def test_token_request_from_protobuf() -> None:
    spec = (_field(1, "a") + _field(1, "b") + _field(4, 1200)
            + _field(3, _field(1, "Pod") + _field(2, "v1") + _field(3, "p")))
    got = protobody.decode_body(_envelope("authentication.k8s.io/v1", "TokenRequest", _field(2, spec)))
    assert got["spec"] == {"audiences": ["a", "b"], "expirationSeconds": 1200,
                           "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}


def test_subject_access_review_extra_from_protobuf() -> None:
    entry = _field(1, "scopes") + _field(2, _field(1, "x") + _field(1, "y"))
    spec = _field(2, _field(1, "/healthz") + _field(2, "get")) + _field(3, "alice") + _field(4, "devs") + _field(5, entry)
    got = protobody.decode_body(_envelope("authorization.k8s.io/v1", "SubjectAccessReview", _field(2, spec)))
    assert got["spec"] == {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}, "user": "alice",
                           "groups": ["devs"], "extra": {"scopes": ["x", "y"]}}


@pytest.mark.parametrize("body", [
    pytest.param(b"{}", id="no-magic"),
    pytest.param(_envelope("v1", "NoSuchKind", b""), id="unknown-kind"),
    pytest.param(protobody.MAGIC + b"\x0a\x7f", id="truncated"),
])
def test_bad_protobuf_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(protobody.ProtobufBodyError):
        protobody.decode_body(body)
