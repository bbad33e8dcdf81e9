"""What a request's framing must be before an app sees it: version, transfer coding, expectation.

aiohttp takes more than a service exposed to any client should, and what it takes depends on
which of its two request parsers is loaded (the C extension by default, the pure-Python one
under AIOHTTP_NO_EXTENSIONS): the C parser takes HTTP/0.9 and HTTP/2.0 and refuses other
versions itself, the Python one takes any `HTTP/<digit>.<digit>`; the C parser refuses
`chunked, chunked`, the Python one decodes it; both skip a coding listed before `chunked`
and hand the app a body still in that coding. `screen` judges what either parser delivered
and `unsupported_version` reads the C parser's own refusal, so a request gets the same answer
whichever parser read it:

- Version: HTTP/1.0 and HTTP/1.1 only. Any other well-formed version is 505 (RFC 9110
  §15.6.6); a version that is not `HTTP/<digit>.<digit>` at all stays the parser's 400.
- Transfer-Encoding: `chunked` alone. Another coding before it is 501, a coding this server
  does not implement (RFC 9112 §6.1); `chunked` not last or listed twice is 400, since the
  body's length cannot be told (§6.3: both parsers refuse the first, the C one the second);
  any Transfer-Encoding in an HTTP/1.0 request is 400 (§6.1: faulty framing).
- Expect: `100-continue` only; any other expectation is 417 (RFC 9110 §10.1.1). With a
  Content-Length over the server's body limit it is 413 at once: aiohttp sends `100 Continue`
  as soon as the route matches, before any handler could look at the size, and the client
  would then send the body only to have it refused. In an HTTP/1.0 request `100-continue` is
  ignored, as that section requires.

The refusals are plain values; the server (shared/server_limits.py) answers them in the
service's own error format and closes the connection, without reading the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import hdrs
from aiohttp.http import HttpVersion, HttpVersion10, HttpVersion11
from aiohttp.http_exceptions import BadStatusLine
from multidict import CIMultiDictProxy

from shared.text import clip

SUPPORTED_VERSIONS = (HttpVersion10, HttpVersion11)
# llhttp's reason for a well-formed version it does not know (its malformed-version reasons
# name the major or minor digit, or a missing dot)
_LLHTTP_UNKNOWN_VERSION = "Invalid HTTP version"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused before routing: the status, what was wrong, headers to send."""

    status: int
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


VERSION_NOT_SUPPORTED = Refusal(505, "HTTP version not supported: this server speaks HTTP/1.1 and HTTP/1.0")


def screen(version: HttpVersion, headers: CIMultiDictProxy[str], *, max_body: int) -> Refusal | None:
    """Why a parsed request must be refused before routing, or None to route it."""
    if version not in SUPPORTED_VERSIONS:
        return VERSION_NOT_SUPPORTED
    return _transfer_coding(version, headers) or _expectation(version, headers, max_body)


def unsupported_version(exc: BaseException | None) -> bool:
    """Whether the parser refused a request for a well-formed version it does not speak."""
    return isinstance(exc, BadStatusLine) and _LLHTTP_UNKNOWN_VERSION in str(exc)


def _transfer_coding(version: HttpVersion, headers: CIMultiDictProxy[str]) -> Refusal | None:
    values = headers.getall(hdrs.TRANSFER_ENCODING, [])
    if not values:
        return None
    if version == HttpVersion10:
        return Refusal(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request")
    raw = ", ".join(values)
    codings = _list(raw)
    if codings == ["chunked"]:
        return None
    if not codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
        return Refusal(400, f"Transfer-Encoding {clip(raw)!r}: chunked must come last, once")
    return Refusal(501, f"Transfer-Encoding {clip(raw)!r} is not implemented: send the body "
                        "with chunked alone or with a Content-Length")


def _expectation(version: HttpVersion, headers: CIMultiDictProxy[str], max_body: int) -> Refusal | None:
    raw = ", ".join(headers.getall(hdrs.EXPECT, []))
    expectations = _list(raw)
    if not expectations:
        return None
    if expectations != ["100-continue"]:
        return Refusal(417, f"Expect {clip(raw)!r} cannot be met: this server knows only 100-continue")
    length = headers.get(hdrs.CONTENT_LENGTH, "")
    if version == HttpVersion11 and length.isdigit() and int(length) > max_body:
        return Refusal(413, f"body of {int(length)} bytes is larger than the limit of {max_body} bytes")
    return None


def _list(value: str) -> list[str]:
    """The lower-cased names of an HTTP list header (parameters and empty elements dropped)."""
    names = (item.split(";", 1)[0].strip().lower() for item in value.split(","))
    return [name for name in names if name]
