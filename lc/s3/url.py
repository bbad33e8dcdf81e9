"""`s3://bucket/key` URLs as upstream's LC reads them (pure).

Upstream takes the bucket from the URL's host and the object key from its path without the
leading `/`. Here the key is everything after the first `/` as written (a `?` or `#` is part
of the key, as S3 allows), and the bucket is checked against S3's naming rules up front, so
a typo is refused with a message naming the URL instead of as a server error later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lc.errors import StorageConfigError
from shared.text import clip

SCHEME = "s3://"
MAX_KEY_BYTES = 1024  # S3's limit on an object key, in UTF-8 bytes
# 3-63 characters of lowercase letters, digits, dots and hyphens, starting and ending with a
# letter or digit; underscores are allowed as some S3 servers (and old AWS buckets) have them
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")


def is_s3(url: str) -> bool:
    """Whether `url` names an object in S3 (upstream: scheme `s3`, case-insensitive)."""
    return url[:len(SCHEME)].lower() == SCHEME


@dataclass(frozen=True, slots=True)
class S3Url:
    """One object (or, with a key ending in `/` or empty, a prefix) in one bucket."""

    bucket: str
    key: str

    @classmethod
    def parse(cls, url: str) -> S3Url:
        """The bucket and key of `s3://bucket/key`; StorageConfigError if it is not one."""
        if not is_s3(url):
            raise StorageConfigError(f"{clip(url)!r} is not an s3://bucket/key URL")
        bucket, _, key = url[len(SCHEME):].partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise StorageConfigError(
                f"{clip(url)!r}: bucket name {clip(bucket)!r} is not valid (3-63 lowercase "
                "letters, digits, dots or hyphens)")
        if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
            raise StorageConfigError(f"{clip(url)!r}: the key is longer than {MAX_KEY_BYTES} bytes")
        if "\x00" in key:
            raise StorageConfigError(f"{clip(url)!r}: the key contains a NUL byte")
        return cls(bucket, key)

    def child(self, name: str) -> S3Url:
        """The object `name` under this prefix (`s3://b/out` + `a.txt` = `s3://b/out/a.txt`)."""
        prefix = self.key if not self.key or self.key.endswith("/") else self.key + "/"
        return S3Url(self.bucket, prefix + name)

    @property
    def basename(self) -> str:
        """The key's last path element ('' for a prefix)."""
        return self.key.rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}"
