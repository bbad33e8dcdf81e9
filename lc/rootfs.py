"""Translating host paths from CRs to paths inside the LC's view of the host filesystem.

On a node the LC sees the host's `/` mounted at ROOTFS_MOUNT_DIR (default /rootfs), and
CRs name host paths (a dataset's index file, output dirs). Upstream joins the two with
filepath.Join, so `/../../etc/x` or a symlink with enough `..` reads files of the LC's own
container. Here a path is resolved as if the mount were `/` (chroot semantics): `..`
that would climb above the mount is refused, an absolute symlink target is a host path
and is re-rooted under the mount, and a relative one is followed but may not climb out.
With no mount prefix ("" = the LC runs on the host) paths are used as they are.
"""

from __future__ import annotations

import os
from collections import deque

from lc.errors import DatasetError, PathEscapeError

MAX_SYMLINKS = 40  # as Linux's ELOOP limit


def host_to_local(rootfs: str, host_path: str) -> str:
    """The path inside the LC for `host_path`; PathEscapeError if it leaves the mount."""
    if "\x00" in host_path:
        raise DatasetError(f"path {host_path!r} contains a NUL byte")
    if not rootfs:
        return os.path.abspath(host_path)
    parts = deque(_split(host_path))
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.popleft()
        if part == "..":
            if not resolved:
                raise PathEscapeError(f"path {host_path!r} escapes {rootfs}")
            resolved.pop()
            continue
        candidate = os.path.join(rootfs, *resolved, part)
        if not os.path.islink(candidate):
            resolved.append(part)
            continue
        hops += 1
        if hops > MAX_SYMLINKS:
            raise DatasetError(f"path {host_path!r}: too many levels of symbolic links")
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = []  # a host-absolute link: re-rooted under the mount
        parts.extendleft(reversed(_split(target)))
    return os.path.join(rootfs, *resolved)


def local_to_host(rootfs: str, local_path: str) -> str:
    """The host path for a path inside the mount (for reporting paths upstream)."""
    if rootfs and (local_path == rootfs or local_path.startswith(rootfs + "/")):
        return local_path[len(rootfs):] or "/"
    return local_path


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]
