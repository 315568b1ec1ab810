"""Keep the garbage collector off the objects a commit does not make.

A driver holds a large heap before a commit starts (the SDKs it imported, Spark's and its own
objects), and the commit's plan is long-lived while the renames run. CPython's full
collections walk all of it, each one tens of milliseconds, and a commit allocates enough to
start dozens of them: at 200,000 files on GCS that was 1.7 s of a 20 s commit's CPU, taken
while holding the GIL, that is while the request loop waits (``docs/benchmarks-cloud.md``).

:func:`spare_old_objects` moves what is alive when it starts into the collector's permanent
generation (``gc.freeze``), :func:`spare_now` does it again once the plan is built, and the
end of the outermost block moves them all back (``gc.unfreeze``), so garbage cycles among them
are collected afterwards as before. Objects that die by reference count are freed at once
either way. A process that freezes objects itself (a pre-fork server) is left alone: its
frozen objects would be thawed with ours. What is frozen when this module is imported counts
as the interpreter's own, not the process's: CPython 3.12 starts with a few hundred of its
tuples in the permanent generation (3.10, 3.11 and 3.13 with none), and taking those for a
process's own turned the sparing off on 3.12 altogether. Thawing them with ours at the end
only puts them back among the objects full collections walk.

The youngest generation is also collected less often (every :data:`YOUNG_THRESHOLD`
allocations instead of 700): with a thousand requests in flight, each collection found their
objects alive and moved them to older generations, which were then walked again; most of
them are freed by reference count within a round trip. The thresholds are restored at the
end, unless the process had raised them itself.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "spare_now", "spare_old_objects"]

#: allocations between two collections of the youngest generation while a commit runs (the
#: default is 700)
YOUNG_THRESHOLD = 10_000


class _Spared:
    """How many commits are inside :func:`spare_old_objects` (a driver may run several at
    once), and whether the frozen objects are ours to thaw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.ours = False
        self.thresholds: tuple[int, int, int] | None = None


_spared = _Spared()

#: objects in the permanent generation when the committer was imported: the interpreter's own
_INTERPRETER_FROZEN = gc.get_freeze_count()


@contextmanager
def spare_old_objects() -> Iterator[None]:
    """Within the block, full collections skip the objects alive when it began."""
    with _spared.lock:
        if _spared.depth == 0:
            _spared.ours = gc.get_freeze_count() <= _INTERPRETER_FROZEN
            first, *older = gc.get_threshold()
            if 0 < first < YOUNG_THRESHOLD:
                _spared.thresholds = (first, older[0], older[1])
                gc.set_threshold(YOUNG_THRESHOLD, *older)
        _spared.depth += 1
        if _spared.ours:
            gc.freeze()
    try:
        yield
    finally:
        with _spared.lock:
            _spared.depth -= 1
            if _spared.depth == 0:
                if _spared.thresholds is not None:
                    gc.set_threshold(*_spared.thresholds)
                    _spared.thresholds = None
                if _spared.ours:
                    gc.unfreeze()
                    _spared.ours = False


def spare_now() -> None:
    """Add what is alive now (a plan just built) to the objects spared, inside the block."""
    with _spared.lock:
        if _spared.depth and _spared.ours:
            gc.freeze()
