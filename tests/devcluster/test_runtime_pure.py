"""Image map parsing and command lines of the process runtime, and the key queue."""

import asyncio

import pytest

from devcluster.controllers.workqueue import KeyQueue
from devcluster.runtime.process import (
    ImageEntry,
    ImageMapError,
    LogBuffer,
    command_line,
    load_image_map,
    parse_image_map,
    should_restart,
)


def test_parse_image_map_list_and_mapping():
    m = parse_image_map({"a:1": ["python", "-m", "x"],
                         "b:1": {"command": ["run"], "args": "ignore", "env": {"K": 1}, "cwd": "/tmp"}})
    assert m["a:1"] == ImageEntry(("python", "-m", "x"))
    assert m["b:1"] == ImageEntry(("run",), append_args=False, cwd="/tmp", env={"K": "1"})


@pytest.mark.parametrize(("data", "msg"), [
    pytest.param([1], "must be a mapping", id="not-mapping"),
    pytest.param({"a": []}, "non-empty list", id="empty-command"),
    pytest.param({"a": "python"}, "command list or a mapping", id="string"),
    pytest.param({"a": {"command": ["x"], "args": "prepend"}}, "append' or 'ignore", id="args-mode"),
])
def test_parse_image_map_errors(data, msg):
    with pytest.raises(ImageMapError, match=msg):
        parse_image_map(data)


def test_load_image_map_yaml_json_and_errors(tmp_path):
    y = tmp_path / "m.yaml"
    y.write_text('sedna/sim:v1: ["python", "-c", "pass"]\n')
    j = tmp_path / "m.json"
    j.write_text('{"x:1": ["true"]}')
    assert load_image_map(y)["sedna/sim:v1"].command == ("python", "-c", "pass")
    assert load_image_map(j)["x:1"].command == ("true",)
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed\n")
    with pytest.raises(ImageMapError, match="cannot parse"):
        load_image_map(bad)
    with pytest.raises(ImageMapError, match="cannot read"):
        load_image_map(tmp_path / "missing.yaml")


def test_command_line_appends_args_ignores_command():
    c = {"command": ["/app/main"], "args": ["--port", 9]}
    assert command_line(ImageEntry(("python", "w.py")), c) == ["python", "w.py", "--port", "9"]
    assert command_line(ImageEntry(("python", "w.py"), append_args=False), c) == ["python", "w.py"]


def test_restart_policy():
    assert should_restart("Always", 0) and should_restart("OnFailure", 2)
    assert not should_restart("OnFailure", 0) and not should_restart("Never", 1)


def test_log_buffer_keeps_tail():
    buf = LogBuffer(limit=5)
    buf.write(b"abc")
    buf.write(b"defg")
    assert buf.getvalue() == b"cdefg"


async def test_key_queue_dedups_and_reruns_key_added_while_processing():
    q = KeyQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    key = await q.get()
    assert key == "a"
    q.add("a")  # while in flight: not handed out twice
    assert await q.get() == "b"
    assert len(q) == 0
    q.done("a")
    assert await asyncio.wait_for(q.get(), 1) == "a"


async def test_key_queue_retry_backs_off():
    q = KeyQueue(base_delay=0.01, max_delay=0.04)
    assert [q.retry("k") for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    assert await asyncio.wait_for(q.get(), 1) == "k"
    q.forget("k")
    assert q.retry("k") == 0.01
