"""The S3 credential the GM sends with an object: annotation `sedna.io/credential` (pure).

The GM copies the Secret named by a Dataset's, Model's or job's `credentialName` into this
annotation as one JSON map: the Secret's annotations `s3-endpoint` (host[:port]) and
`s3-usehttps` (`"0"` = plain HTTP, anything else or missing = HTTPS) merged with its data
`ACCESS_KEY_ID` and `SECRET_ACCESS_KEY` (shared/spec/upstream-lc.md, storage). `s3-region` is
ours and optional (default `us-east-1`, which S3-compatible servers accept; AWS redirects a
request for a bucket of another region and the client follows).

The secret key is kept out of `repr` and of every message here: an error names the key that
is missing or malformed, never a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lc.errors import StorageConfigError, StorageCredentialMissing
from shared.text import clip

ANNOTATION = "sedna.io/credential"
DEFAULT_REGION = "us-east-1"
MAX_ANNOTATION = 64 * 1024  # characters of the annotation's JSON read at all
# host[:port]: a DNS name, an IPv4 address or a bracketed IPv6 address; no scheme, no path
_ENDPOINT = re.compile(r"(?:[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")


@dataclass(frozen=True, slots=True)
class S3Credential:
    """Where an S3 server is and the static V4 key pair to sign with."""

    endpoint: str  # host[:port]
    use_https: bool
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    region: str = DEFAULT_REGION

    @property
    def endpoint_url(self) -> str:
        return f"{'https' if self.use_https else 'http'}://{self.endpoint}"

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, Any] | None) -> S3Credential | None:
        """The credential of an object's `metadata.annotations`; None when there is none."""
        value = (annotations or {}).get(ANNOTATION)
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            raise StorageConfigError(f"annotation {ANNOTATION} must be a JSON string")
        return cls.from_json(value)

    @classmethod
    def required(cls, annotations: Mapping[str, Any] | None, *, url: str, owner: str) -> S3Credential:
        """The credential an s3:// `url` of object `owner` needs; StorageCredentialMissing
        when the object carries none (upstream's LC crashes there, its bug B-8)."""
        credential = cls.from_annotations(annotations)
        if credential is None:
            raise StorageCredentialMissing(
                f"{owner} names {clip(url)} but carries no {ANNOTATION} annotation: set its "
                "spec.credentialName to a Secret with the s3-endpoint annotation and the "
                "ACCESS_KEY_ID and SECRET_ACCESS_KEY keys")
        return credential

    @classmethod
    def from_json(cls, text: str) -> S3Credential:
        """The credential in the annotation's JSON text."""
        if len(text) > MAX_ANNOTATION:
            raise StorageConfigError(f"annotation {ANNOTATION} is over {MAX_ANNOTATION} characters")
        try:
            data = json.loads(text)
        except ValueError:  # the message would quote the text, secret included
            raise StorageConfigError(f"annotation {ANNOTATION} is not JSON") from None
        if not isinstance(data, dict):
            raise StorageConfigError(f"annotation {ANNOTATION} must be a JSON map")
        return cls.from_map(data)

    @classmethod
    def from_map(cls, data: Mapping[str, Any]) -> S3Credential:
        """The credential in the annotation's decoded map."""
        endpoint = _required(data, "s3-endpoint")
        if not _ENDPOINT.fullmatch(endpoint):
            raise StorageConfigError(
                f"{ANNOTATION}: s3-endpoint {clip(endpoint)!r} must be host[:port], without a "
                "scheme (s3-usehttps chooses http or https)")
        use_https = data.get("s3-usehttps", "1")
        region = data.get("s3-region") or DEFAULT_REGION
        if not isinstance(use_https, str) or not isinstance(region, str):
            raise StorageConfigError(f"{ANNOTATION}: s3-usehttps and s3-region must be strings")
        return cls(endpoint=endpoint, use_https=use_https != "0",
                   access_key=_required(data, "ACCESS_KEY_ID"),
                   secret_key=_required(data, "SECRET_ACCESS_KEY"), region=region)


def _required(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise StorageConfigError(f"{ANNOTATION} has no {key} (a non-empty string is required)")
    return value
