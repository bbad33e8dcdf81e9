"""How the GM's cyclic garbage collector runs.

The GM holds hundreds of thousands of long-lived containers: its informer caches (a dict per
object and per nested field) and its hub sessions (about 50 each: the aiohttp request,
protocol, websocket, reader, tasks, the session itself). With Python's default young-generation
threshold (700 allocations) a full collection runs each time the long-lived heap has grown by a
quarter, and each one walks the whole heap; an ended session is cyclic garbage that only a
full collection frees. Measured on the hub (`bench/hub_fleet.py`, 6,000 LCs cut and
reconnecting at once): 30% of the GM's CPU went to full collections (six of them, 0.13 to
0.64 s each) with the default.

So the GM:
- collects its young generation every `YOUNG_THRESHOLD` allocations instead of 700, which
  makes full collections rarer in proportion (cyclic garbage lives longer: a reconnect storm
  of 6,000 sessions peaks some 60 MB higher before it is freed);
- once its caches have synced, collects once and freezes what is alive then (the code, the
  configuration, the first list of every cache) out of every later collection. What was
  frozen is never scanned again; the price is that a frozen object that later becomes part of
  unreachable cycle is not freed: the cache's objects hold no cycles (they are freed by
  reference counting when replaced), so that is a few objects of start-up at most.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 10  # young collections per middle one, Python's default
OLD_THRESHOLD = 10  # middle collections per full one considered, Python's default


def configure() -> None:
    """At start, before the caches fill."""
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)


def settle() -> None:
    """Once the caches have synced: what is alive now is kept out of later collections."""
    gc.collect()
    gc.freeze()
