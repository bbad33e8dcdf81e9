"""Who an LC is: the authenticators the hub asks before it admits a connection for a node.

The `Node-Name` header is only a claim. Whoever is admitted as a node gets that node's
snapshot (credential annotations built from Secrets included), may set the status of its
Datasets and jobs, and replaces the node's current session. So the hub admits a claim only
when a credential proves it. Modes (docs/operations.md says what each protects against):

- none: no authenticator; every claim is believed (upstream's behaviour, the default).
- shared token: one bearer token for every LC. Keeps out those without the token; any
  holder can still claim any node.
- node tokens: a table token -> node (a file or a Secret); a token admits only its node.
- TokenReview: the LC's projected ServiceAccount token, reviewed by the API server; the
  node of the pod the token is bound to must be the claimed node.

Each authenticator answers for one token: an `Identity` when the token proves the claim,
None when it does not know the token (the next authenticator may), `NodeMismatch` when the
token is valid but for another node (refused at once: no other authenticator can make that
right), `AuthUnavailable` when it cannot tell right now. The hub maps these errors to
401/403/503 in one place. Tokens are compared as SHA-256 digests, so a lookup's timing
tells nothing about the token, and the final check uses `hmac.compare_digest`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gm.config import yaml_mapping
from gm.errors import ConfigError, GMError
from gm.kube.apierrors import ApiError
from gm.kube.client import KubeClient
from gm.kube.resources import SECRETS
from gm.kube.tokenreview import TokenReviewResult, review_token
from shared.logs import event

log = logging.getLogger("sedna.gm.edge.auth")

NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MIN_TOKEN_LENGTH = 16  # shorter strings are guessable, not secrets
NODE_TOKENS_KEY = "tokens.yaml"  # the Secret key holding the token -> node table


class AuthError(GMError):
    """A connection that cannot be admitted; `status` is the HTTP answer."""

    status = 401


class Unauthenticated(AuthError):
    """No credential, or one no authenticator recognizes (401)."""


class NodeMismatch(AuthError):
    """A valid credential that does not prove the claimed node (403)."""

    status = 403


class AuthUnavailable(AuthError):
    """The credential cannot be checked now (API server down, table unreadable): 503."""

    status = 503


class AuthConfigError(ConfigError):
    """A node token table or an authentication setting that cannot be used."""


@dataclass(frozen=True, slots=True)
class Identity:
    """A proven caller: the node it may act as (None: any, shared token or no auth)."""

    node: str | None
    user: str
    method: str


ANONYMOUS = Identity(None, "anonymous", "none")


class Authenticator(Protocol):
    """One way of proving a node claim."""

    async def authenticate(self, node: str, token: str) -> Identity | None: ...


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class NodeAuth:
    """The hub's admission check: a bearer token tried against each authenticator in turn."""

    def __init__(self, authenticators: Sequence[Authenticator] = ()) -> None:
        self.authenticators = tuple(authenticators)

    @classmethod
    def shared(cls, token: str | None) -> NodeAuth:
        """Upstream-compatible: one token for every LC, or none at all."""
        return cls([SharedToken(token)] if token else [])

    @property
    def required(self) -> bool:
        return bool(self.authenticators)

    async def admit(self, node: str, authorization: str) -> Identity:
        """The proven identity for `node` given an Authorization header; AuthError otherwise."""
        if not self.authenticators:
            return ANONYMOUS
        token = bearer(authorization)
        if token is None:
            raise Unauthenticated("missing bearer token")
        for auth in self.authenticators:
            identity = await auth.authenticate(node, token)
            if identity is not None:
                return identity
        raise Unauthenticated("bearer token not recognized")


def bearer(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


class SharedToken:
    """One token for every LC: proves membership, not which node."""

    def __init__(self, token: str) -> None:
        self._digest = digest(token)

    async def authenticate(self, node: str, token: str) -> Identity | None:
        if hmac.compare_digest(digest(token), self._digest):
            return Identity(None, "shared-token", "token")
        return None


# ---- node tokens ------------------------------------------------------------------------


class NodeTokenTable:
    """token -> node, kept as digests; built from the YAML mapping `<token>: <node>`."""

    __slots__ = ("_by_digest",)

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._by_digest = {digest(token): node for token, node in tokens.items()}

    @classmethod
    def parse(cls, text: str, *, where: str) -> NodeTokenTable:
        data = yaml_mapping(text, fail=lambda message: AuthConfigError(f"{where}: {message}"),
                            not_mapping="must be a mapping <token>: <node name>")
        for token, node in data.items():
            _check_entry(where, token, node)
        return cls(data)

    def node_of(self, token: str) -> str | None:
        return self._by_digest.get(digest(token))

    def __len__(self) -> int:
        return len(self._by_digest)


def _check_entry(where: str, token: object, node: object) -> None:
    if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
        raise AuthConfigError(f"{where}: every token must be a string of at least "
                              f"{MIN_TOKEN_LENGTH} characters")
    if not isinstance(node, str) or len(node) > 253 or not NODE_NAME.fullmatch(node):
        raise AuthConfigError(f"{where}: {str(node)[:64]!r} is not a valid node name")


class NodeTokens:
    """Per-node tokens: a token admits only the node the table names for it."""

    def __init__(self, table: TableSource) -> None:
        self._table = table

    async def authenticate(self, node: str, token: str) -> Identity | None:
        table = await self._table.current()
        owner = table.node_of(token)
        if owner is None:
            return None
        if not hmac.compare_digest(owner.encode(), node.encode()):
            raise NodeMismatch(f"the token is node {owner}'s, not {node}'s")
        return Identity(node, f"node-token:{node}", "nodeTokens")


class TableSource(Protocol):
    async def current(self) -> NodeTokenTable: ...


class FileTable:
    """A token table file, re-read when it changes (a mounted Secret is updated in place)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp = self._stat()
        self._table = self._read()

    def _stat(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise AuthConfigError(f"node tokens file {self.path!r}: {exc.strerror}") from exc
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> NodeTokenTable:
        try:
            with open(self.path, encoding="utf-8") as f:
                return NodeTokenTable.parse(f.read(), where=self.path)
        except OSError as exc:
            raise AuthConfigError(f"node tokens file {self.path!r}: {exc.strerror}") from exc

    async def current(self) -> NodeTokenTable:
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._table, self._stamp = self._read(), stamp
                event(log, "node tokens reloaded", path=self.path, tokens=len(self._table))
        except AuthConfigError as exc:  # keep serving the last good table
            event(log, "node tokens file unusable, keeping the previous table",
                  level=logging.WARNING, error=str(exc))
        return self._table


class SecretTable:
    """A token table in a Secret (key `tokens.yaml`), read through the API at most every `ttl` s."""

    def __init__(self, client: KubeClient, namespace: str, name: str, *, ttl: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client, self.namespace, self.name = client, namespace, name
        self._ttl, self._clock = ttl, clock
        self._table: NodeTokenTable | None = None
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()  # one read at a time; concurrent handshakes share it

    async def current(self) -> NodeTokenTable:
        async with self._lock:
            if self._table is None or self._clock() - self._read_at >= self._ttl:
                await self._refresh()
        assert self._table is not None
        return self._table

    async def _refresh(self) -> None:
        where = f"Secret {self.namespace}/{self.name}"
        try:
            secret = await self._client.get(SECRETS, self.name, namespace=self.namespace)
            table = NodeTokenTable.parse(_secret_text(secret, NODE_TOKENS_KEY, where), where=where)
        except (ApiError, AuthConfigError) as exc:
            if self._table is None:
                raise AuthUnavailable(f"cannot read node tokens from {where}: {exc}") from exc
            event(log, "node tokens unreadable, keeping the previous table", level=logging.WARNING,
                  secret=f"{self.namespace}/{self.name}", error=str(exc))
            self._read_at = self._clock()
            return
        self._table, self._read_at = table, self._clock()


def _secret_text(secret: Mapping[str, object], key: str, where: str) -> str:
    data = secret.get("data")
    raw = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(raw, str):
        raise AuthConfigError(f"{where} has no key {key!r}")
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise AuthConfigError(f"{where} key {key!r} is not base64 UTF-8 text") from exc


# ---- TokenReview ------------------------------------------------------------------------


Reviewer = Callable[[str], Awaitable[TokenReviewResult]]


class TokenReviewAuth:
    """The LC's projected ServiceAccount token, reviewed by the API server.

    A positive review is cached for `cache_seconds` (keyed by the token's digest), so an LC
    redialing in a loop costs one review per period, not one per dial. Negative answers are
    not cached: a token just issued is admitted as soon as the API server knows it.
    """

    def __init__(self, review: Reviewer, *, audiences: Sequence[str] = (),
                 usernames: Sequence[str] = (), cache_seconds: float = 10.0, max_cached: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._review = review
        self.audiences = tuple(audiences)
        self.usernames = frozenset(usernames)
        self._ttl, self._max, self._clock = cache_seconds, max_cached, clock
        self._cache: OrderedDict[bytes, tuple[float, Identity]] = OrderedDict()

    @classmethod
    def with_client(cls, client: KubeClient, *, audiences: Sequence[str] = (),
                    usernames: Sequence[str] = (), cache_seconds: float = 10.0) -> TokenReviewAuth:
        """Reviews through the GM's API client (RBAC: create tokenreviews)."""
        wanted = tuple(audiences)

        async def review(token: str) -> TokenReviewResult:
            return await review_token(client, token, audiences=wanted)
        return cls(review, audiences=wanted, usernames=usernames, cache_seconds=cache_seconds)

    async def authenticate(self, node: str, token: str) -> Identity | None:
        key = digest(token)
        identity = self._cached(key)
        if identity is None:
            identity = await self._reviewed(token)
            if identity is None:
                return None
            self._remember(key, identity)
        if identity.node is None or not hmac.compare_digest(identity.node.encode(), node.encode()):
            raise NodeMismatch(f"{identity.user} runs on node {identity.node}, not {node}")
        return identity

    async def _reviewed(self, token: str) -> Identity | None:
        try:
            result = await self._review(token)
        except ApiError as exc:
            raise AuthUnavailable(f"TokenReview failed: {exc}") from exc
        if not result.authenticated:
            event(log, "token review: not authenticated", error=result.error)
            return None
        if self.audiences and not set(self.audiences) & set(result.audiences):
            event(log, "token review: wrong audience", audiences=",".join(result.audiences),
                  wanted=",".join(self.audiences))
            return None
        if self.usernames and result.username not in self.usernames:
            raise NodeMismatch(f"{result.username} may not connect as a LocalController")
        if result.node is None:
            raise NodeMismatch(f"the token of {result.username} is not bound to a pod on a node")
        return Identity(result.node, result.username, "tokenReview")

    def _cached(self, key: bytes) -> Identity | None:
        hit = self._cache.get(key)
        if hit is None:
            return None
        if self._clock() >= hit[0]:
            del self._cache[key]
            return None
        return hit[1]

    def _remember(self, key: bytes, identity: Identity) -> None:
        if self._ttl <= 0:
            return
        self._cache[key] = (self._clock() + self._ttl, identity)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
