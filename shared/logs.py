"""Structured logging for both services: key=value text or one JSON object per line.

Call `setup(level, fmt)` once at start-up; then log with the helper
`event(log, "synced", key=k, n=3)` (or `log.info("synced", extra=kv(key=k))`), so every
line of a reconcile names the object key.

Logging must never crash or mislead its caller, whatever the values hold:
- field names that `logging.LogRecord` reserves (`message`, `name`, `args`...) or that the
  formatters write themselves (`ts`, `level`, `logger`, `msg`, `exc`) are renamed with a
  trailing `_` when the fields are built (`message=` becomes `message_=`), so they neither
  raise KeyError in `makeRecord` nor overwrite the line's own level or logger;
- in text format a value with spaces, quotes, `=`, backslashes, newlines or any other
  control or line-separator character is quoted and escaped, so a value (an ownerName from
  the edge, say) cannot start a forged line; field names are reduced to `[A-Za-z0-9_.-]`;
- in JSON format strings are escaped by the encoder, and lone surrogates (which UTF-8
  cannot encode) are written as `\\udXXX` escapes instead of failing the line;
- a value whose `str()` raises is logged as a placeholder naming its type;
- a field longer than `shared.text.LOG_FIELD_LIMIT` characters is cut there and its length
  stated, so a value sent from outside (a 1 MB literal, say) cannot make a 1 MB line.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

import orjson

from shared.text import LOG_FIELD_LIMIT, clip

_RECORD_KEYS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_FORMATTER_KEYS = frozenset({"ts", "level", "logger", "msg", "exc"})
_RESERVED = _RECORD_KEYS | _FORMATTER_KEYS
_FIELD_MARK = "_sedna_fields"  # the record attribute naming the structured fields

# Everything a logfmt reader could take for a separator, a quote or a line break.
_NEEDS_QUOTING = re.compile(r'[\s"=\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]')
_ESCAPED = re.compile(r'[\\"\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def safe_key(key: str) -> str:
    """The name a field is logged under: reserved names get a trailing `_`."""
    key = _BAD_KEY_CHARS.sub("_", str(key)) or "_"
    while key in _RESERVED:
        key += "_"
    return key


def kv(**fields: Any) -> dict[str, Any]:
    """The `extra=` mapping for structured fields, with reserved names renamed."""
    return _extra(fields)


def _extra(fields: Mapping[str, Any]) -> dict[str, Any]:
    out = {safe_key(k): v for k, v in fields.items()}
    out[_FIELD_MARK] = tuple(out)
    return out


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    names = getattr(record, _FIELD_MARK, None)
    if names is not None:
        return {k: getattr(record, k, None) for k in names}
    # a plain `extra={...}` from code that does not use kv(): take what is not the record's own
    return {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return clip(value, LOG_FIELD_LIMIT)
    try:
        return clip(str(value), LOG_FIELD_LIMIT)
    except Exception:  # a broken __str__ must not lose the line
        return f"<unprintable {type(value).__name__}>"


def _bounded(value: Any) -> Any:
    """A JSON field value no longer than LOG_FIELD_LIMIT once written."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if not isinstance(value, (Mapping, list, tuple)):
        return _text(value)
    try:
        encoded = orjson.dumps(value, default=_text)
    except (orjson.JSONEncodeError, TypeError):  # written by the formatter's fallback
        return value
    return value if len(encoded) <= LOG_FIELD_LIMIT else clip(encoded.decode(), LOG_FIELD_LIMIT)


def _escape_char(match: re.Match[str]) -> str:
    c = match.group()
    short = _SHORT_ESCAPES.get(c)
    if short is not None:
        return short
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def kv_value(value: Any) -> str:
    """One value in key=value text: bare when that is unambiguous, else quoted and escaped."""
    text = _text(value)
    if text and not _NEEDS_QUOTING.search(text):
        return text
    return '"' + _ESCAPED.sub(_escape_char, text) + '"'


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"ts={ts}.{int(record.msecs):03d}Z", f"level={record.levelname.lower()}",
                 f"logger={kv_value(record.name)}", f"msg={kv_value(record.getMessage())}"]
        parts += [f"{safe_key(k)}={kv_value(v)}" for k, v in _fields(record).items()]
        if record.exc_info:
            parts.append(f"exc={kv_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {safe_key(k): _bounded(v) for k, v in _fields(record).items()}
        doc.update(ts=record.created, level=record.levelname.lower(), logger=record.name,
                   msg=record.getMessage())
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(doc, default=_text).decode()
        except (orjson.JSONEncodeError, TypeError):  # lone surrogates, keys that are not str
            return orjson.dumps(_encodable(doc), default=_text).decode()


def _encodable(value: Any) -> Any:
    """A copy orjson can always write: surrogates escaped, keys made strings."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {_encodable(_text(k)): _encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_encodable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _encodable(_text(value))


def setup(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger once: `fmt` is "text" (key=value) or "json"."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def event(logger: logging.Logger, msg: str, /, *, level: int = logging.INFO,
          exc_info: bool | BaseException = False,
          **fields: Any) -> None:
    """Log `msg` with structured fields (reserved names renamed, see the module docstring);
    `exc_info=True` adds the exception being handled (or pass the exception)."""
    logger.log(level, msg, extra=_extra(fields), exc_info=exc_info, stacklevel=2)


class Throttle:
    """Lines of one kind logged one by one up to `per_window` each `window` seconds; beyond
    that counted, and one line per message says how many were left out once the window ends.

    For lines that come in floods (a session opened or closed per LC in a reconnect storm,
    an upgrade refused per dial): a few name their node, the rest are a count, so a storm of
    20,000 costs a few lines instead of 40,000 and the process's CPU goes to the storm.
    The left-out count is written from the event loop when one is running (a timer at the
    window's end), else by the next call after the window.
    """

    def __init__(self, logger: logging.Logger, *, per_window: int = 20, window: float = 1.0,
                 clock: Any = time.monotonic) -> None:
        self.logger, self.per_window, self.window, self._clock = logger, per_window, window, clock
        self._start = float("-inf")
        self._logged = 0
        self._left_out: dict[tuple[str, int], int] = {}
        self._timer: Any = None

    def event(self, msg: str, /, *, level: int = logging.INFO, **fields: Any) -> None:
        if not self.logger.isEnabledFor(level):
            return
        now = self._clock()
        if now - self._start >= self.window:
            self.flush()
            self._start, self._logged = now, 0
        if self._logged < self.per_window:
            self._logged += 1
            self.logger.log(level, msg, extra=_extra(fields), stacklevel=2)
            return
        key = (msg, level)
        self._left_out[key] = self._left_out.get(key, 0) + 1
        if self._timer is None:
            self._schedule()

    def flush(self) -> None:
        """Write the counts of the lines left out so far."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        left_out, self._left_out = self._left_out, {}
        for (msg, level), count in left_out.items():
            self.logger.log(level, f"{msg} (more lines like it left out)",
                            extra=_extra({"left_out": count, "window_s": self.window}))

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(max(self._start + self.window - self._clock(), 0.0), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self.flush()
