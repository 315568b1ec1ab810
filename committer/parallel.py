"""Run one function over many items on a shared pool, failing fast, with bounded memory.

Only ``2 x threads`` items are in flight at once, so an iterator of a million items is never
turned into a million futures; the first failure stops new submissions and is re-raised after
the work already in flight has finished (no thread is left touching the store behind us).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def _submit_more(executor: Executor, it: Iterator[T], work: Callable[[T], R],
                 pending: dict[Future[R], T], window: int) -> bool:
    """Submit items of ``it`` until ``window`` are pending; ``True`` once ``it`` is spent."""
    while len(pending) < window:
        try:
            item = next(it)
        except StopIteration:
            return True
        pending[executor.submit(work, item)] = item
    return False


def run_parallel(
    executor: Executor,
    items: Iterable[T],
    work: Callable[[T], R],
    *,
    window: int,
    on_result: Callable[[T, R], None] | None = None,
) -> None:
    """Apply ``work`` to every item; ``on_result`` runs on the calling thread as items finish.
    A ``window`` of 0 runs every item on the calling thread, in order: for calls so quick
    (a ``stat`` on local disk) that handing them to threads costs more than they do."""
    if window <= 0:
        for item in items:
            result = work(item)
            if on_result is not None:
                on_result(item, result)
        return
    pending: dict[Future[R], T] = {}
    failure: BaseException | None = None
    it = iter(items)
    exhausted = False
    while True:
        if not exhausted and failure is None:
            exhausted = _submit_more(executor, it, work, pending, window)
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


def run_pulled(
    executor: Executor,
    items: Iterable[T],
    work: Callable[[T], R],
    *,
    workers: int,
    on_result: Callable[[T, R], None] | None = None,
    report_every: float = 0.2,
) -> None:
    """Like :func:`run_parallel`, for many items of similar, small cost (a chunk of renames on
    local disk): ``workers`` long-lived tasks each pull the next item from the shared iterator
    and loop, as threads given their own share would. No future per item and no hand-off
    through the calling thread per item: that per-item traffic (and the calling thread waking
    to take the GIL for each) costs as much as the work itself when an item is cheap.
    ``on_result`` still runs on the calling thread, for the items finished since its last
    wake (at most ``report_every`` seconds after one finished). The calling thread waits on
    one event the workers set as an item or a worker finishes, not on every worker's future
    with a timeout: against a service that takes minutes (an emulator on a loaded machine)
    that wait had woken five times a second to set up and take down a waiter on each of
    them, 0.4 s of CPU in a 2,000-file commit of four minutes. The first failure stops
    further pulls and is re-raised once every worker has stopped."""
    it = iter(items)
    pull_lock = threading.Lock()
    done_lock = threading.Lock()
    finished: list[tuple[T, R]] = []
    errors: list[BaseException] = []  # in the order they happened
    failed = threading.Event()
    news = threading.Event()  # an item or a worker finished since the calling thread looked
    over = threading.Event()  # a failure, or the last worker done: no more waiting to report
    running = [max(1, workers)]

    def worker() -> None:
        try:
            while not failed.is_set():
                with pull_lock:
                    try:
                        item = next(it)
                    except StopIteration:
                        return
                try:
                    result = work(item)
                except BaseException as e:
                    with done_lock:
                        errors.append(e)
                    failed.set()
                    over.set()
                    return
                if on_result is not None:
                    with done_lock:
                        finished.append((item, result))
                    news.set()
        finally:
            with done_lock:
                running[0] -= 1
                last = not running[0]
            if last:
                over.set()
            news.set()

    def report() -> None:
        if on_result is None or failed.is_set():
            return
        with done_lock:
            batch = finished[:]
            finished.clear()
        for item, result in batch:
            on_result(item, result)

    futures = [executor.submit(worker) for _ in range(running[0])]
    while True:
        news.wait()
        news.clear()
        report()
        with done_lock:
            if not running[0]:
                break
        # what finishes meanwhile is reported together; the end is not waited for (a 1,000-
        # file commit's rename stage had waited up to this long after its last rename)
        over.wait(report_every)
    wait(futures)
    report()
    for fut in futures:
        fut.result()  # a worker's own failure outside ``work`` (none expected)
    if errors:
        raise errors[0]


def prefetched(executor: Executor, items: Iterable[T], fetch: Callable[[T], R], *,
               window: int) -> Generator[tuple[T, R], None, None]:
    """``(item, fetch(item))`` for every item, in order, with up to ``window`` fetches running
    ahead on the pool: for work that waits (reads) feeding work that holds the GIL, done by the
    caller as it consumes. A failed fetch is raised when its turn comes, after the fetches
    still running have finished; so is leaving the loop early (no thread is left behind)."""
    ahead: deque[tuple[T, Future[R]]] = deque()
    it = iter(items)
    try:
        while True:
            while len(ahead) < max(1, window):
                try:
                    item = next(it)
                except StopIteration:
                    break
                ahead.append((item, executor.submit(fetch, item)))
            if not ahead:
                return
            item, fut = ahead.popleft()
            yield item, fut.result()
    finally:
        for _, fut in ahead:
            fut.cancel()
        wait([fut for _, fut in ahead])


def fetched_as_done(executor: Executor, items: Iterable[T], fetch: Callable[[T], R], *,
                    window: int) -> Generator[tuple[T, R], None, None]:
    """Like :func:`prefetched`, but each ``(item, fetch(item))`` as soon as its fetch is done,
    in no set order: one fetch in a service's latency tail (a read taking ten times the median)
    then holds back none of the others, where in order it would stall the whole window."""
    pending: dict[Future[R], T] = {}
    it = iter(items)
    exhausted = False
    try:
        while True:
            if not exhausted:
                exhausted = _submit_more(executor, it, fetch, pending, max(1, window))
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield pending.pop(fut), fut.result()
    finally:
        for fut in pending:
            fut.cancel()
        wait(list(pending))


class Counter:
    """A thread-safe progress counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> int:
        with self._lock:
            self.value += n
            return self.value
