"""The ways stages spread work over the commit's pool: every item done once, results on
the calling thread, the first failure stopping further work and re-raised."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from committer.parallel import fetched_as_done, prefetched, run_parallel, run_pulled


class _Fetch:
    """A fetch that records how many ran at once and which finished; it takes ``slow_s``
    for item 0, ``sleep_s`` for the others, and fails on ``fail_at``."""

    def __init__(self, sleep_s: float = 0.002, slow_s: float | None = None,
                 fail_at: int | None = None) -> None:
        self.sleep_s = sleep_s
        self.slow_s = sleep_s if slow_s is None else slow_s
        self.fail_at = fail_at
        self.running = 0
        self.most = 0
        self.finished: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, i: int) -> int:
        if i == self.fail_at:
            raise ValueError(f"item {i}")
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.slow_s if i == 0 else self.sleep_s)
        with self._lock:
            self.running -= 1
            self.finished.append(i)
        return i * 3


@pytest.mark.parametrize("runner", ["pulled", "windowed"])
def test_every_item_once_and_results_on_the_calling_thread(runner: str) -> None:
    seen: list[int] = []
    threads: set[int] = set()

    def on_result(item: int, result: int) -> None:
        assert result == item * 2
        seen.append(item)
        threads.add(threading.get_ident())

    with ThreadPoolExecutor(8) as pool:
        if runner == "pulled":
            run_pulled(pool, range(500), lambda i: i * 2, workers=8, on_result=on_result,
                       report_every=0.01)
        else:
            run_parallel(pool, range(500), lambda i: i * 2, window=16, on_result=on_result)
    assert sorted(seen) == list(range(500))
    assert threads == {threading.get_ident()}


def test_a_window_of_zero_runs_every_item_inline_in_order() -> None:
    seen: list[tuple[int, int]] = []
    with ThreadPoolExecutor(2) as pool:
        run_parallel(pool, range(5), lambda i: threading.get_ident(), window=0,
                     on_result=lambda i, ident: seen.append((i, ident)))
    assert seen == [(i, threading.get_ident()) for i in range(5)]


def test_pulled_stops_at_the_first_failure() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            started.append(i)
        if i == 3:
            raise ValueError("item 3")
        time.sleep(0.001)
        return i

    with ThreadPoolExecutor(4) as pool, pytest.raises(ValueError, match="item 3"):
        run_pulled(pool, range(10_000), work, workers=4)
    assert len(started) < 100  # the workers stopped pulling soon after the failure


def test_pulled_with_nothing_to_do() -> None:
    with ThreadPoolExecutor(2) as pool:
        run_pulled(pool, [], lambda i: i, workers=2, on_result=lambda *_: None)


def test_prefetched_yields_every_item_in_order_with_reads_ahead() -> None:
    fetch = _Fetch()
    with ThreadPoolExecutor(8) as pool:
        got = list(prefetched(pool, range(200), fetch, window=4))
    assert got == [(i, i * 3) for i in range(200)]
    assert 1 < fetch.most <= 4


def test_prefetched_raises_a_failed_fetch_in_its_turn_and_leaves_no_fetch_running() -> None:
    fetch = _Fetch(sleep_s=0.005, fail_at=5)
    consumed: list[int] = []
    with ThreadPoolExecutor(4) as pool:
        with pytest.raises(ValueError, match="item 5"):
            for item, _ in prefetched(pool, range(1000), fetch, window=4):
                consumed.append(item)
        settled = len(fetch.finished)
        time.sleep(0.05)
        assert len(fetch.finished) == settled  # nothing was still running behind the caller
    assert consumed == [0, 1, 2, 3, 4]
    assert settled < 20


@pytest.mark.parametrize("fetched", [prefetched, fetched_as_done])
def test_fetching_left_early_waits_for_the_fetches_in_flight(fetched: Any) -> None:
    finished: list[int] = []

    def fetch(i: int) -> int:
        time.sleep(0.01)
        finished.append(i)
        return i

    with ThreadPoolExecutor(4) as pool:
        gen = fetched(pool, range(100), fetch, window=4)
        next(gen)
        gen.close()
        settled = len(finished)
        time.sleep(0.05)
        assert len(finished) == settled
    assert settled <= 5


def test_fetched_as_done_yields_every_item_as_its_fetch_finishes_within_the_window() -> None:
    fetch = _Fetch(slow_s=0.05)  # the first read is in the latency tail
    with ThreadPoolExecutor(8) as pool:
        got = list(fetched_as_done(pool, range(200), fetch, window=4))
    assert sorted(got) == [(i, i * 3) for i in range(200)]
    assert got[0] != (0, 0)  # the slow one held back none of the others
    assert 1 < fetch.most <= 4


def test_fetched_as_done_raises_a_failed_fetch_and_leaves_no_fetch_running() -> None:
    fetch = _Fetch(sleep_s=0.005, fail_at=5)
    with ThreadPoolExecutor(4) as pool:
        with pytest.raises(ValueError, match="item 5"):
            for _ in fetched_as_done(pool, range(1000), fetch, window=4):
                pass
        settled = len(fetch.finished)
        time.sleep(0.05)
        assert len(fetch.finished) == settled  # nothing was still running behind the caller
    assert settled < 20
