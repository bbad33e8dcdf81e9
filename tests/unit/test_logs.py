"""shared/logs.py: fields can never crash the caller, forge a line or overwrite the line's own keys."""

from __future__ import annotations

import asyncio
import io
import logging
import re

import orjson
import pytest

from shared.logs import JsonFormatter, KeyValueFormatter, Throttle, event, kv, kv_value, safe_key
from shared.text import LOG_FIELD_LIMIT, clip

LOGFMT_PAIR = re.compile(r'([A-Za-z0-9_.-]+)=("(?:[^"\\]|\\.)*"|[^\s"=]+)(?: |$)')


@pytest.fixture
def capture():
    """A logger writing through a given formatter into a buffer."""
    handlers: list[logging.Handler] = []

    def make(formatter: logging.Formatter) -> tuple[logging.Logger, io.StringIO]:
        buf = io.StringIO()
        handler = logging.StreamHandler(buf)
        handler.setFormatter(formatter)
        logger = logging.getLogger(f"test.logs.{len(handlers)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.handlers[:] = [handler]
        handlers.append(handler)
        return logger, buf

    yield make
    for h in handlers:
        h.close()


def parse_logfmt(line: str) -> dict[str, str]:
    """A strict logfmt reader: the whole line must be key=value pairs."""
    pairs = LOGFMT_PAIR.findall(line)
    assert "".join(f"{k}={v} " for k, v in pairs).rstrip() == line, line
    return dict(pairs)


@pytest.mark.parametrize("key", ["message", "msg", "name", "args", "levelname", "asctime",
                                 "logger", "ts", "exc", "created", "module"])
def test_reserved_field_names_are_renamed_not_fatal(capture, key):
    log, buf = capture(KeyValueFormatter())
    event(log, "invalid spec", level=logging.WARNING, **{key: "from the spec", "key": "ns/job"})
    _assert_renamed(buf, key)


@pytest.mark.parametrize("key", ["level", "exc_info", "message"])
def test_kv_renames_for_plain_logger_calls(capture, key):
    log, buf = capture(KeyValueFormatter())
    log.warning("invalid spec", extra=kv(**{key: "from the spec", "key": "ns/job"}))
    _assert_renamed(buf, key)


def _assert_renamed(buf: io.StringIO, key: str) -> None:
    line = buf.getvalue().rstrip("\n")
    fields = parse_logfmt(line)
    assert fields[f"{key}_"] == '"from the spec"'
    assert fields["level"] == "warning"
    assert fields["msg"] == '"invalid spec"'
    assert fields["logger"].startswith("test.logs.")
    assert fields["key"] == "ns/job"


def test_kv_builds_a_safe_extra_for_plain_logger_calls(capture):
    log, buf = capture(JsonFormatter())
    log.error("x", extra=kv(message="m", levelname="DEBUG", n=3))
    doc = orjson.loads(buf.getvalue())
    assert doc["level"] == "error" and doc["msg"] == "x"
    assert doc["message_"] == "m" and doc["levelname_"] == "DEBUG" and doc["n"] == 3


def test_safe_key_reduces_odd_names():
    assert safe_key("a b=c\n") == "a_b_c_"
    assert safe_key("message") == "message_"
    assert safe_key("owner.name") == "owner.name"


FORGED = "job\nts=2026-01-01T00:00:00.000Z level=error logger=gm msg=\"forged\""


@pytest.mark.parametrize("value", [
    pytest.param(FORGED, id="newline"),
    pytest.param("a\rlevel=error", id="carriage-return"),
    pytest.param("a\u2028level=error", id="line-separator"),
    pytest.param("a\x85level=error", id="next-line"),
    pytest.param("a\x00b\x1b[31mred", id="nul-and-ansi"),
    pytest.param('say "hi" \\ bye', id="quotes-and-backslash"),
    pytest.param("tab\there", id="tab"),
    pytest.param("\ud800lone", id="lone-surrogate"),
])
def test_text_values_stay_on_one_line_and_parse_back(capture, value):
    log, buf = capture(KeyValueFormatter())
    event(log, value, ownerName=value, key="default/" + value)
    out = buf.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n")
    line = out[:-1]
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]", line)
    fields = parse_logfmt(line)
    assert set(fields) == {"ts", "level", "logger", "msg", "ownerName", "key"}
    assert fields["level"] == "info"
    line.encode("utf-8")  # writable to any UTF-8 stream


def test_escapes_are_reversible():
    value = 'a\nb\r\tc"d\\e\x01\u2028'
    quoted = kv_value(value)
    assert quoted == '"a\\nb\\r\\tc\\"d\\\\e\\x01\\u2028"'
    assert kv_value("plain") == "plain"
    assert kv_value("") == '""'
    assert kv_value("two words") == '"two words"'


def test_json_lines_escape_newlines_and_survive_surrogates(capture):
    log, buf = capture(JsonFormatter())
    event(log, "report", ownerName=FORGED, bad="\udfff", level=logging.WARNING)
    out = buf.getvalue()
    assert out.count("\n") == 1
    doc = orjson.loads(out)
    assert doc["ownerName"] == FORGED
    assert doc["bad"] == "\\udfff"
    assert doc["level"] == "warning"


def test_unprintable_values_do_not_lose_the_line(capture):
    class Broken:
        def __str__(self):
            raise RuntimeError("no")

    for formatter in (KeyValueFormatter(), JsonFormatter()):
        log, buf = capture(formatter)
        event(log, "still here", thing=Broken())
        assert "still here" in buf.getvalue() and "unprintable Broken" in buf.getvalue()


def test_exception_text_is_one_escaped_field(capture):
    log, buf = capture(KeyValueFormatter())
    try:
        raise ValueError("boom\nlevel=error")
    except ValueError:
        event(log, "crashed", level=logging.ERROR, exc_info=True, key="ns/a")
    out = buf.getvalue()
    assert out.count("\n") == 1
    fields = parse_logfmt(out[:-1])
    assert "Traceback" in fields["exc"] and "ValueError: boom\\nlevel=error" in fields["exc"]


@pytest.mark.parametrize("formatter", [KeyValueFormatter, JsonFormatter])
@pytest.mark.parametrize("value", ["7" * 1_000_000, ["x" * 1000] * 1000, {"k": "v" * 100_000}])
def test_a_huge_field_is_clipped_and_its_length_stated(capture, formatter, value):
    logger, buf = capture(formatter())
    event(logger, "refused", body=value, worker="w1")
    line = buf.getvalue()
    assert len(line) < LOG_FIELD_LIMIT + 1000
    assert "characters)" in line
    fields = orjson.loads(line) if formatter is JsonFormatter else parse_logfmt(line.rstrip("\n"))
    assert fields["worker"] == "w1"


def test_a_short_container_stays_structured_in_json(capture):
    logger, buf = capture(JsonFormatter())
    event(logger, "ok", items=[1, 2], obj={"a": "b"})
    fields = orjson.loads(buf.getvalue())
    assert fields["items"] == [1, 2] and fields["obj"] == {"a": "b"}


def test_clip_keeps_the_start_and_states_the_length():
    assert clip("abc", 5) == "abc"
    assert clip("a" * 10, 4) == "aaaa... (10 characters)"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throttle_logs_a_few_lines_a_window_then_counts_the_rest(capture):
    logger, buf = capture(KeyValueFormatter())
    clock = _Clock()
    lines = Throttle(logger, per_window=3, window=1.0, clock=clock)
    for i in range(10):
        lines.event("hub session opened", node=f"n{i}")
    lines.event("hub session closed", level=logging.WARNING, node="n0")
    written = buf.getvalue().splitlines()
    assert [re.search(r"node=(\S+)", line).group(1) for line in written] == ["n0", "n1", "n2"]
    clock.now += 1.0  # the next window: the counts of the last one come first
    lines.event("hub session opened", node="n10")
    written = buf.getvalue().splitlines()[3:]
    assert 'msg="hub session opened (more lines like it left out)" left_out=7' in written[0]
    assert "level=warning" in written[1] and "left_out=1" in written[1]
    assert "node=n10" in written[2] and len(written) == 3


def test_throttle_skips_levels_the_logger_drops(capture):
    logger, buf = capture(KeyValueFormatter())
    logger.setLevel(logging.WARNING)
    lines = Throttle(logger, per_window=1, clock=_Clock())
    for _ in range(5):
        lines.event("quiet")
    lines.flush()
    assert buf.getvalue() == ""


async def test_throttle_writes_the_count_when_the_window_ends_without_another_line(capture):
    logger, buf = capture(KeyValueFormatter())
    lines = Throttle(logger, per_window=1, window=0.05)
    for _ in range(4):
        lines.event("storm")
    assert len(buf.getvalue().splitlines()) == 1
    await asyncio.sleep(0.2)
    assert "left_out=3" in buf.getvalue().splitlines()[1]
