"""A test server or cluster started in a thread of its own at collection, so that its start
overlaps the tests that run before the first one that needs it (tests/cluster/plugin.py,
tests/s3/conftest.py)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

import pytest

T = TypeVar("T")


class Starting(Generic[T]):
    """`factory()` entered in a background thread; `get` waits for it. A start that failed with
    `unavailable` fails the test that needs it, naming `what`; any other error is raised there."""

    def __init__(self, what: str, factory: Callable[[], AbstractContextManager[T]],
                 unavailable: type[BaseException], *, thread: str) -> None:
        self.what, self._factory, self._unavailable = what, factory, unavailable
        self._stack = contextlib.ExitStack()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=thread, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._stack.enter_context(self._factory())
        except BaseException as err:  # handed to the first test that needs it
            self._error = err

    def get(self) -> T:
        self._thread.join()
        if isinstance(self._error, self._unavailable):
            pytest.fail(f"{self.what} is not available: {self._error}", pytrace=False)
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value

    def close(self) -> None:
        self._thread.join()
        self._stack.close()
