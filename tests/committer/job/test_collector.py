"""The garbage collector during a commit: the objects alive before it (and its plan) are not
walked by full collections, young collections are rarer, and the collector is left exactly
as the commit found it, whoever else froze objects or ran commits beside it."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from committer.job.collector import YOUNG_THRESHOLD, spare_now, spare_old_objects
from tests.committer.helpers import new_job, task_attempt, visible_files


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    # A clean slate: CPython 3.12 keeps its immortal objects in the permanent generation,
    # moved there by any full collection; with automatic collections off, only the tests'
    # own gc.collect() calls move them, so the counts below are exact on every Python.
    thresholds = gc.get_threshold()
    enabled = gc.isenabled()
    gc.unfreeze()
    gc.disable()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    if enabled:
        gc.enable()


def test_objects_alive_before_the_block_are_spared_then_given_back() -> None:
    old = [[i] for i in range(1000)]  # noqa: F841 - alive across the block
    thresholds = gc.get_threshold()
    with spare_old_objects():
        assert gc.get_freeze_count() >= 1000
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        frozen = gc.get_freeze_count()
        plan = [[i] for i in range(500)]  # noqa: F841 - the plan, built inside
        spare_now()
        assert gc.get_freeze_count() >= frozen + 500
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


def test_garbage_cycles_frozen_during_the_block_are_collected_after_it() -> None:
    class Node:
        other: object

    with spare_old_objects():
        a, b = Node(), Node()
        a.other, b.other = b, a
        spare_now()
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is not None  # a cycle of spared objects: kept while the block runs
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def test_nested_and_concurrent_blocks_give_back_only_when_the_last_ends() -> None:
    inner_done = threading.Event()
    outer_may_end = threading.Event()

    # Events, waited on generously: only the order of the two blocks' ends matters here.
    def other_commit() -> None:
        with spare_old_objects():
            inner_done.set()
            assert outer_may_end.wait(600)

    with spare_old_objects():
        worker = threading.Thread(target=other_commit)
        worker.start()
        assert inner_done.wait(600)
    assert gc.get_freeze_count() > 0  # the other commit is still running
    outer_may_end.set()
    worker.join(600)
    assert not worker.is_alive()
    assert gc.get_freeze_count() == 0


def test_a_process_that_freezes_objects_itself_is_left_alone() -> None:
    gc.freeze()
    mine = gc.get_freeze_count()
    with spare_old_objects():
        spare_now()
        assert gc.get_freeze_count() == mine
    assert gc.get_freeze_count() == mine


def test_a_commit_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    gc.set_threshold(500, 7, 9)
    dest = tmp_path / "out"
    job = new_job(dest)
    ta = task_attempt(dest, 0, 0, {"p=1/a.csv": b"a"})
    ta.commit()
    job.commit({ta.task_id: ta.task_attempt_id})
    assert visible_files(dest) == {"p=1/a.csv": b"a"}
    assert gc.get_threshold() == (500, 7, 9) and gc.get_freeze_count() == 0


def test_objects_frozen_before_the_committer_is_imported_are_the_interpreters() -> None:
    # CPython 3.12 starts with a few hundred of its own tuples frozen; taken for a process
    # that freezes objects itself, they turned the sparing off on 3.12. Simulated here on
    # any Python, in a fresh interpreter: objects frozen before the import, then a commit.
    code = """
import gc
gc.disable()  # only the freezes below move objects (3.12: and no collection's immortals)
kept = [[i] for i in range(300)]
gc.freeze()
start = gc.get_freeze_count()
from committer.job.collector import spare_old_objects
with spare_old_objects():
    inside = gc.get_freeze_count()
print(start, inside, gc.get_freeze_count())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parents[3], timeout=300, check=True)
    start, inside, after = map(int, done.stdout.split())
    assert start >= 300
    assert inside > start  # spared: what was alive at the block's start frozen with them
    assert after == 0  # and all thawed at its end, the interpreter's own with ours
