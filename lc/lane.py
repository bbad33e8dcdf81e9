"""Worker reports on the LC's request lane: `POST /sedna/workers/{name}/info` without aiohttp.

A worker report is the LC's hot path (a node's workers post hundreds a second, each answered
after a durable commit); on aiohttp, its request and response machinery cost more than
everything the LC does with a report. The port's front (shared/lanes.py) reads each request's
head; this lane takes the reports it can answer exactly as the aiohttp route would, reads the
body and hands it to the same `ReportTaker` (lc/api.py), so the answers, metrics and log lines
are the route's. It takes only the plain case, and every other request stays aiohttp's, whose
route answers it as before:

- `POST` to the route's path (with or without the trailing slash), no query, no percent-escape;
- HTTP/1.1 with a Content-Length of at most the body limit (no chunked body, no `Expect`);
- a Content-Type, Accept and Content-Encoding the route accepts without decoding (identity);
- room in the body budget for the declared length at once (a request that would wait for it
  is aiohttp's, which waits and answers 503 as lc/budget.py says).

A body that does not arrive within the server's body timeout is answered 408 and the
connection closed, as on the route; a client gone before its body arrived is counted and
logged as there.
"""

from __future__ import annotations

import re
import time

from aiohttp import web

from lc.api import (
    BUDGET_KEY,
    JSON,
    LIMITS_KEY,
    METRICS_KEY,
    TAKER_KEY,
    ReportTaker,
    check_media,
)
from lc.budget import BodyBudget, Share
from lc.errors import ReportError
from lc.metrics import LCMetrics
from lc.openapi import MAX_BODY
from shared.lanes import Reply, RequestHead, RequestLane, http_response

_PATH = re.compile(r"/sedna/workers/([^/%?#{}]+)/info/?")


class ReportLane(RequestLane):
    """Takes the plain worker reports (see the module docstring)."""

    def __init__(self, taker: ReportTaker, budget: BodyBudget, metrics: LCMetrics, *, body_timeout: float) -> None:
        super().__init__()
        self.taker = taker
        self.budget = budget
        self.metrics = metrics
        self.body_timeout = body_timeout
        self.taken = 0  # reports this lane answered (or is answering)

    @classmethod
    def of(cls, app: web.Application) -> ReportLane:
        """The lane for the LC's worker API app (lc/api.py `build_app`)."""
        return cls(app[TAKER_KEY], app[BUDGET_KEY], app[METRICS_KEY], body_timeout=app[LIMITS_KEY].body_timeout)

    def open(self, head: RequestHead, length: int) -> _ReportCall | None:
        if head.method != "POST" or length > MAX_BODY:
            return None
        match = _PATH.fullmatch(head.path)
        if match is None:
            return None
        try:
            check_media(head.headers)
        except ReportError:
            return None  # the route's refusal, from aiohttp
        if head.headers.get("Content-Encoding", "identity").strip().lower() != "identity":
            return None  # inflating is aiohttp's
        share = self.budget.try_share(length)
        if share is None:
            return None
        self.taken += 1
        self.metrics.reports_in_flight.inc()
        return _ReportCall(self, match.group(1), share, head.remote, "close" in head.tokens("Connection"))


class _ReportCall:
    __slots__ = ("_lane", "_name", "_share", "_remote", "_started", "_close")

    def __init__(self, lane: ReportLane, name: str, share: Share, remote: str | None, close: bool) -> None:
        self._close = close  # the client asked to close after the answer
        self._lane = lane
        self._name = name
        self._share = share
        self._remote = remote
        self._started = time.perf_counter()

    def _end(self) -> None:
        self._share.release()
        self._lane.metrics.reports_in_flight.dec()

    async def answer(self, body: bytes) -> Reply:
        try:
            answer = await self._lane.taker.take(self._name, body, self._started)
        finally:
            self._end()
        return (http_response(answer.status, answer.body, content_type=JSON, headers=answer.headers,
                              close=self._close), self._close)

    def timed_out(self) -> Reply:
        self._end()
        within = self._lane.body_timeout
        answer = self._lane.taker.refused(self._name, None, ReportError(
            f"body not received within {within:g}s", status=408, reason="body_timeout"))
        return http_response(answer.status, answer.body, content_type=JSON, close=True), True

    def cut_short(self, arrived: int) -> Reply:
        self._end()
        answer = self._lane.taker.refused(self._name, None, ReportError(
            f"body cannot be decoded: Not enough data to satisfy content length header "
            f"(the client closed its side after {arrived} bytes)", reason="bad_encoding"))
        return http_response(answer.status, answer.body, content_type=JSON, close=True), True

    def gone(self) -> None:
        self._end()
        self._lane.taker.client_gone(self._name, self._remote)

