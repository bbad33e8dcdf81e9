"""gm/heap.py: the GM's collector thresholds, and the freeze once its caches have synced."""

from __future__ import annotations

import gc

import pytest

from gm import heap


@pytest.fixture
def restored():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_configure_makes_young_collections_rarer(restored):
    heap.configure()
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, heap.MIDDLE_THRESHOLD, heap.OLD_THRESHOLD)
    assert heap.YOUNG_THRESHOLD > 700


def test_settle_keeps_what_is_alive_out_of_later_collections(restored):
    kept = [[i] for i in range(1000)]  # lists: always tracked by the collector
    assert any(o is kept[0] for o in gc.get_objects())
    heap.settle()
    assert gc.get_freeze_count() >= len(kept)
    assert not any(o is kept[0] for o in gc.get_objects())  # no collection walks it now
