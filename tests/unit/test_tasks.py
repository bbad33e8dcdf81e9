import asyncio

import pytest

from shared.tasks import until_first_done


async def test_first_to_end_stops_the_others():
    stopped = []

    async def forever(name):
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(name)

    async def fails():
        raise RuntimeError("reader broke")

    tasks = [asyncio.create_task(forever("writer")), asyncio.create_task(forever("pinger")),
             asyncio.create_task(fails())]
    done = await until_first_done(tasks)
    assert [str(t.exception()) for t in done] == ["reader broke"]
    assert sorted(stopped) == ["pinger", "writer"]
    assert all(t.done() for t in tasks)


async def test_cancelling_the_caller_while_a_child_fails_still_cancels():
    # the case a Python 3.11 TaskGroup gets wrong: a child failing as the parent is cancelled
    started = asyncio.Event()

    async def fails_soon():
        started.set()
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    async def forever():
        await asyncio.Event().wait()

    children = [asyncio.create_task(fails_soon()), asyncio.create_task(forever())]
    parent = asyncio.create_task(until_first_done(children))
    await started.wait()
    parent.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parent
    assert all(t.done() for t in children)
