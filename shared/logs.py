"""Structured logging for both services: key=value text or one JSON object per line.

Call `setup(level, fmt)` once at start-up; then log with `log.info("synced", extra=kv(key=k))`
or the helper `event(log, "synced", key=k, n=3)`, so every line of a reconcile names the
object key.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}


def _kv_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' "='):
        return '"' + text.replace('"', '\\"') + '"'
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"ts={ts}.{int(record.msecs):03d}Z", f"level={record.levelname.lower()}",
                 f"logger={record.name}", f"msg={_kv_value(record.getMessage())}"]
        parts += [f"{k}={_kv_value(v)}" for k, v in _fields(record).items()]
        if record.exc_info:
            parts.append(f"exc={_kv_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": record.created, "level": record.levelname.lower(), "logger": record.name,
            "msg": record.getMessage(), **_fields(record),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def setup(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger once: `fmt` is "text" (key=value) or "json"."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def event(logger: logging.Logger, msg: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log `msg` with structured fields."""
    logger.log(level, msg, extra=fields)
