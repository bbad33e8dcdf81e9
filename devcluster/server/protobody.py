"""Protobuf request bodies (`application/vnd.kubernetes.protobuf`) decoded into the JSON a JSON client sends.

kubectl's typed commands and Helm encode built-in objects as protobuf: the 4-byte magic
`k8s\\0`, then a `runtime.Unknown` envelope whose typeMeta names apiVersion and kind and
whose `raw` holds the object message. The dev cluster stores JSON objects, so a body is
turned into exactly the dict a Go JSON client would have sent for the same object; the
store then treats it like any JSON body.

Wire parsing is the protobuf package's, over message classes built at run time from the
field table (devcluster.server.apitypes): it handles varints, packed and unpacked repeated
scalars, map entries and unknown fields. This module only maps values to JSON:

- Go's protobuf encoder writes every non-pointer field, zero or not, while its JSON encoder
  omits zero scalars under `omitempty`. So a zero scalar (0, false, "") is omitted unless
  the table marks the field `keep_zero` (a Go pointer or a field without omitempty);
  repeated fields and maps are omitted when empty; a present message is kept, `{}` when
  empty, as Go writes non-pointer structs.
- Special types (devcluster/README.md, "Protobuf request bodies"): Quantity -> string,
  IntOrString -> int or string, Time -> RFC 3339 seconds (zero: omitted, Go's null),
  MicroTime -> RFC 3339 with microseconds, Duration -> Go duration string, RawExtension
  and FieldsV1 -> the embedded JSON object, bytes -> base64, int64 -> JSON number.

Fields on the wire that the table does not know are skipped, as the real server's decoder
skips them.
"""

from __future__ import annotations

import base64
import datetime as dt
from functools import cache
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from devcluster.server import apitypes
from devcluster.server.apitypes import Field, MessageType

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_OMIT = object()


class ProtobufBodyError(ValueError):
    """A body that is not a decodable Kubernetes protobuf object; the server answers 400."""


def decode_body(raw: bytes) -> dict[str, Any]:
    """The JSON object (kind and apiVersion first) a protobuf request body stands for."""
    if not raw.startswith(MAGIC):
        raise ProtobufBodyError("the protobuf body does not start with the Kubernetes magic prefix k8s\\x00")
    envelope = _parse(UNKNOWN, raw[len(MAGIC):], what="the runtime.Unknown envelope")
    api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind
    if envelope.contentEncoding:
        raise ProtobufBodyError(f"unsupported protobuf content encoding {envelope.contentEncoding!r}")
    if envelope.contentType not in ("", CONTENT_TYPE):
        raise ProtobufBodyError(f"unsupported content type {envelope.contentType!r} inside the protobuf envelope")
    mt = apitypes.type_of(api_version, kind)
    if mt is None:
        raise ProtobufBodyError(f'no kind "{kind}" is registered for version "{api_version}" in protobuf encoding')
    obj = _to_json(_parse(mt.name, envelope.raw, what=f"the {kind} message"), mt)
    return {"kind": kind, "apiVersion": api_version, **obj}


def _parse(name: str, data: bytes, *, what: str) -> Message:
    msg = _message_class(name)()
    try:
        msg.ParseFromString(data)
    except DecodeError as err:
        raise ProtobufBodyError(f"cannot decode {what}: {err}") from None
    return msg


# -- JSON mapping ---------------------------------------------------------------------------------

def _to_json(msg: Message, mt: MessageType) -> Any:
    if mt.special:
        return _special(msg, mt.special)
    present = {fd.number: value for fd, value in msg.ListFields()}  # set fields only, any order
    out: dict[str, Any] = {}
    for f in mt.fields:  # declaration order: the order Go's JSON encoder writes
        if f.number not in present:
            continue
        value = _field_json(present[f.number], f)
        if value is _OMIT:
            continue
        if f.inline and isinstance(value, dict):
            out.update(value)
        else:
            out[f.json_name] = value
    return out


def _field_json(value: Any, f: Field) -> Any:
    if f.is_map:
        entries = {k: _value_json(v, f) for k, v in sorted(value.items())}
        return {k: v for k, v in entries.items() if v is not _OMIT} or _OMIT
    if f.repeated:
        items = [v for v in (_value_json(item, f) for item in value) if v is not _OMIT]
        return items or _OMIT
    if f.kind != "message" and not f.keep_zero and not value:
        return _OMIT
    return _value_json(value, f)


def _value_json(value: Any, f: Field) -> Any:
    if f.kind == "message":
        mt = f.message_type
        assert mt is not None
        return _to_json(value, mt)
    if f.kind == "bytes":
        return base64.b64encode(value).decode("ascii")
    return value


def _special(msg: Message, special: str) -> Any:
    if special == "quantity":
        return msg.string or _OMIT
    if special == "intorstring":
        return msg.strVal if msg.type == 1 else msg.intVal
    if special in ("time", "microtime"):
        return _timestamp(msg.seconds, msg.nanos, micro=special == "microtime")
    if special == "duration":
        return go_duration(msg.duration)
    if special == "stringlist":
        return list(msg.items)
    if special == "rawjson":
        return _raw_json(getattr(msg, msg.DESCRIPTOR.fields_by_number[1].name))  # raw / Raw
    raise ProtobufBodyError(f"no JSON mapping for special type {special}")


def _timestamp(seconds: int, nanos: int, *, micro: bool) -> Any:
    if not seconds and not nanos:
        return _OMIT
    t = _EPOCH + dt.timedelta(seconds=seconds, microseconds=nanos // 1000)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _raw_json(raw: bytes) -> Any:
    if not raw:
        return _OMIT
    if raw.startswith(MAGIC):
        return decode_body(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise ProtobufBodyError(f"an embedded object is neither JSON nor protobuf: {err}") from None


_UNITS = ((3_600_000_000_000, "h"), (60_000_000_000, "m"))


def go_duration(nanos: int) -> str:
    """Go's time.Duration.String: "1h2m3.5s", "1.5ms", "0s"."""
    if nanos == 0:
        return "0s"
    sign, n = ("-", -nanos) if nanos < 0 else ("", nanos)
    if n < 1_000_000_000:
        for scale, unit in ((1_000_000, "ms"), (1_000, "µs"), (1, "ns")):
            if n >= scale:
                return sign + _decimal(n, scale) + unit
    out = ""
    for scale, unit in _UNITS:
        if n >= scale or out:
            out += f"{n // scale}{unit}"
            n %= scale
    return sign + out + _decimal(n, 1_000_000_000) + "s"


def _decimal(n: int, scale: int) -> str:
    whole, frac = divmod(n, scale)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


# -- message classes from the field table ------------------------------------------------------------

_SCALAR_TYPES = {
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "sint32": descriptor_pb2.FieldDescriptorProto.TYPE_SINT32,
    "sint64": descriptor_pb2.FieldDescriptorProto.TYPE_SINT64,
    "fixed32": descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32,
    "fixed64": descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64,
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
}
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE


@cache
def _message_class(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(name))


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    """A descriptor pool holding every message of the field table, one file per proto package."""
    files = _file_protos()
    pool = descriptor_pool.DescriptorPool()
    for package in _dependency_order(files):
        pool.Add(files[package])
    return pool


def _file_protos() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for name in apitypes.message_names():
        package, short = name.rsplit(".", 1)
        fdp = files.get(package)
        if fdp is None:
            fdp = files[package] = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package,
                                                                      syntax="proto2")
        _add_message(fdp, short, apitypes.message(name))
    return files


def _add_message(fdp: descriptor_pb2.FileDescriptorProto, short: str, mt: MessageType) -> None:
    mp = fdp.message_type.add(name=short)
    for f in mt.fields:
        if f.type_name and (dep := f"{f.type_name.rsplit('.', 1)[0]}.proto") != fdp.name \
                and dep not in fdp.dependency:
            fdp.dependency.append(dep)
        if f.is_map:
            entry = mp.nested_type.add(name=f"{f.name[:1].upper()}{f.name[1:]}Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=_OPTIONAL, type=_SCALAR_TYPES[f.map_key or "string"])
            _typed(entry.field.add(name="value", number=2, label=_OPTIONAL), f)
            mp.field.add(name=f.name, number=f.number, label=_REPEATED, type=_MESSAGE,
                         type_name=f".{fdp.package}.{short}.{entry.name}")
        else:
            _typed(mp.field.add(name=f.name, number=f.number, label=_REPEATED if f.repeated else _OPTIONAL), f)


def _typed(fp: descriptor_pb2.FieldDescriptorProto, f: Field) -> None:
    if f.kind == "message":
        fp.type = _MESSAGE
        fp.type_name = f".{f.type_name}"
    else:
        fp.type = _SCALAR_TYPES[f.kind]


def _dependency_order(files: dict[str, descriptor_pb2.FileDescriptorProto]) -> list[str]:
    by_file = {fdp.name: package for package, fdp in files.items()}
    order: list[str] = []

    def visit(package: str, path: tuple[str, ...]) -> None:
        if package in order:
            return
        if package in path:
            raise ValueError(f"proto packages depend on each other in a cycle: {path}")
        for dep in files[package].dependency:
            visit(by_file[dep], (*path, package))
        order.append(package)

    for package in sorted(files):
        visit(package, ())
    return order
