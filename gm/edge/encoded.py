"""Object versions as the hub sends them: encoded once, shared by every session.

When thousands of LCs connect at once (a GM restart, a network cut) every session sends its
node's objects; an object many nodes need (a Model) would be encoded once per node, and all of
them again at the next reconnect. Here what a version encodes to is kept per object key and
reused while that version lasts: for native sessions its msgpack body (each session's frame
has its own `seq`, so the body is spliced into a frame head, proto.native.pack_body); for
upstream sessions the whole text frame (upstream's envelope has no `seq`).

A version is the payload object itself: the object source hands the hub one mapping per
version (gm/edge/objects.py builds a new one only when what goes down changed) and never
mutates it (the hub's ObjectSource contract), so an entry is valid while it holds that very
mapping, and holding it keeps its identity from being reused. Only the latest version of a key
is kept: `forget` drops an entry when the hub is told of another version or of a delete. The
store is bounded in bytes, least recently used first out; a version larger than
`max_bytes // 16` is encoded at each use and never stored.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proto import MAX_FRAME_BYTES, Message, ObjKey, encode_upstream, pack_body

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class EncodedStats:
    built: int = 0  # encodings made (native bodies and upstream frames)
    shared: int = 0  # uses of an encoding made earlier
    evicted: int = 0  # entries dropped to stay within the bound


class _Entry:
    __slots__ = ("obj", "native", "upstream")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj  # the version encoded (held: its identity is the version's)
        self.native: bytes | None = None
        self.upstream: str | None = None

    @property
    def size(self) -> int:
        return len(self.native or b"") + len(self.upstream or "")


class EncodedVersions:
    """The encodings of the latest version of each object key the hub sent.

    Invariant: `_bytes` is the sum of the entries' sizes and at most `max_bytes` between calls.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_bytes = max_bytes
        self._max_frame_bytes = max_frame_bytes
        self._entries: OrderedDict[ObjKey, _Entry] = OrderedDict()
        self._bytes = 0
        self.stats = EncodedStats()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def native_body(self, key: ObjKey, obj: Mapping[str, Any]) -> bytes:
        """`obj`'s body as msgpack, for encode_native's `packed_body`; EncodeError if it has none."""
        entry = self._lookup(key, obj)
        if entry is not None and entry.native is not None:
            self.stats.shared += 1
            return entry.native
        body = pack_body(obj, what=f"{key[0]} {key[1]}/{key[2]}")
        self.stats.built += 1
        self._keep(key, obj, entry, native=body)
        return body

    def upstream_frame(self, key: ObjKey, msg: Message) -> str:
        """The upstream text frame of an upsert of `msg.body` (the same for every session)."""
        assert msg.body is not None and msg.key == key
        entry = self._lookup(key, msg.body)
        if entry is not None and entry.upstream is not None:
            self.stats.shared += 1
            return entry.upstream
        frame = encode_upstream(msg, max_bytes=self._max_frame_bytes)
        self.stats.built += 1
        self._keep(key, msg.body, entry, upstream=frame)
        return frame

    def forget(self, key: ObjKey, *, unless: Mapping[str, Any] | None = None) -> None:
        """Drop the key's encodings, unless they are of the version `unless`."""
        entry = self._entries.get(key)
        if entry is not None and entry.obj is not unless:
            del self._entries[key]
            self._bytes -= entry.size

    def _lookup(self, key: ObjKey, obj: Mapping[str, Any]) -> _Entry | None:
        """The key's entry if it is of this version (now the most recently used)."""
        entry = self._entries.get(key)
        if entry is None or entry.obj is not obj:
            return None
        self._entries.move_to_end(key)
        return entry

    def _keep(self, key: ObjKey, obj: Mapping[str, Any], entry: _Entry | None, *,
              native: bytes | None = None, upstream: str | None = None) -> None:
        """Store a new encoding of `obj` (in `entry`, its version's, or a new one replacing an
        older version's), unless it is too large to keep; then the least recently used go
        until the store is within its bound again."""
        size = len(native or b"") + len(upstream or "")
        if (entry.size if entry is not None else 0) + size > self.max_bytes // 16:
            return
        if entry is None:
            self.forget(key)
            entry = self._entries[key] = _Entry(obj)
        entry.native = native if native is not None else entry.native
        entry.upstream = upstream if upstream is not None else entry.upstream
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, oldest = self._entries.popitem(last=False)
            self._bytes -= oldest.size
            self.stats.evicted += 1
