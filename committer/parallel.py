"""Run one function over many items on a shared pool, failing fast, with bounded memory.

Only ``2 x threads`` items are in flight at once, so an iterator of a million items is never
turned into a million futures; the first failure stops new submissions and is re-raised after
the work already in flight has finished (no thread is left touching the store behind us).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_parallel(
    executor: Executor,
    items: Iterable[T],
    work: Callable[[T], R],
    *,
    window: int,
    on_result: Callable[[T, R], None] | None = None,
) -> None:
    """Apply ``work`` to every item; ``on_result`` runs on the calling thread as items finish."""
    pending: dict[Future[R], T] = {}
    failure: BaseException | None = None
    it = iter(items)
    exhausted = False
    while True:
        while not exhausted and failure is None and len(pending) < window:
            try:
                item = next(it)
            except StopIteration:
                exhausted = True
                break
            pending[executor.submit(work, item)] = item
        if not pending:
            break
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for fut in done:
            item = pending.pop(fut)
            exc = fut.exception()
            if exc is not None:
                if failure is None:
                    failure = exc
                continue
            if on_result is not None and failure is None:
                on_result(item, fut.result())
    if failure is not None:
        raise failure


class Counter:
    """A thread-safe progress counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> int:
        with self._lock:
            self.value += n
            return self.value
