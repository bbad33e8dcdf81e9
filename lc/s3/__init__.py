"""The LC's S3 client: objects named `s3://bucket/key` in Datasets, Models and job outputs.

- `url`: parsing `s3://bucket/key` (pure)
- `credential`: the `sedna.io/credential` annotation the GM sends with an object (pure)
- `retry`: which failures are transient, the backoff between attempts (pure)
- `client`: `S3Client`, one credential's requests: bounded reads and downloads, uploads of
  bytes, files and directories, server-side copies
- `clients`: `S3Clients`, the clients one object (a Dataset, a learning job) uses, one per
  credential, and its scratch directory; closed when the object goes

Errors are lc/errors.py's `StorageError` tree (local files keep lc/files.py's `FileRefused`).
Used by the Dataset and learning managers (lc/managers/): see lc/README.md, S3.
"""

from lc.s3.client import DEFAULT_SETTINGS, ObjectInfo, S3Client, S3Settings
from lc.s3.clients import S3Clients
from lc.s3.credential import ANNOTATION, S3Credential
from lc.s3.url import S3Url, is_s3

__all__ = ["ANNOTATION", "DEFAULT_SETTINGS", "ObjectInfo", "S3Client", "S3Clients",
           "S3Credential", "S3Settings", "S3Url", "is_s3"]
