"""The ways stages spread work over the commit's pool: every item done once, results on
the calling thread, the first failure stopping further work and re-raised.

Nothing here depends on how fast threads run: an order a test needs (a slow first read, a
failure before the other items finish) is made by the work waiting on events, and "nothing is
left running" is read off the futures the pool handed out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from committer.parallel import fetched_as_done, prefetched, run_parallel, run_pulled

#: how long work waits for what the code under test must make happen: reached only when it
#: does not, and the test then fails naming it
WAIT_S = 60.0


class _Pool(ThreadPoolExecutor):
    """A pool that keeps every future it hands out, in order, with an event set when the
    ``i``-th is done (:meth:`done`) and one when any is: a test can tell whether any work it
    was given is still running or waiting to, and wait for a given piece of it to end."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.futures: list[Future[Any]] = []
        self.one_done = threading.Event()
        self._done: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            future = super().submit(fn, *args, **kwargs)
            self.futures.append(future)
            done = self._done.setdefault(len(self.futures) - 1, threading.Event())

        def ended(_future: Future[Any]) -> None:
            done.set()
            self.one_done.set()

        future.add_done_callback(ended)
        return future

    def done(self, i: int) -> threading.Event:
        """Set once the ``i``-th future handed out (counting from 0) is done."""
        with self._lock:
            return self._done.setdefault(i, threading.Event())

    def busy(self) -> int:
        with self._lock:
            return sum(1 for f in self.futures if not f.done())


class _Fetch:
    """A fetch that records which fetches started, how many ran at once and which finished;
    it fails on ``fail_at``.

    ``hold_first``: item 0's fetch returns only once that event is set (at most ``WAIT_S``;
    ``held`` says whether it was), so item 0 is the slow one whatever the scheduler does; with
    ``others_to_start``, the event is set once that many other fetches have started.
    ``hold_others``: every other fetch (item 0's too, without ``hold_first``) returns only
    once that event is set."""

    def __init__(self, fail_at: int | None = None, *,
                 hold_first: threading.Event | None = None, others_to_start: int = 0,
                 hold_others: threading.Event | None = None) -> None:
        self.fail_at = fail_at
        self.hold_first = hold_first
        self.others_to_start = others_to_start
        self.hold_others = hold_others
        self.held: bool | None = None
        self.timed_out: list[int] = []
        self.running = 0
        self.most = 0
        self.started: list[int] = []
        self.finished: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, i: int) -> int:
        if i == self.fail_at:
            raise ValueError(f"item {i}")
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.started.append(i)
            others = sum(1 for s in self.started if s != 0)
        if self.hold_first is not None and self.others_to_start and \
                others >= self.others_to_start:
            self.hold_first.set()
        if i == 0 and self.hold_first is not None:
            self.held = self.hold_first.wait(WAIT_S)
        elif self.hold_others is not None and not self.hold_others.wait(WAIT_S):
            self.timed_out.append(i)
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
    """Four workers pull items 0 to 3; 0, 1 and 2 are held until the worker that failed on 3
    has stopped (the first of the four to end): then each finishes its item and pulls no
    other."""
    started: list[int] = []
    lock = threading.Lock()
    timed_out: list[int] = []
    with _Pool(4) as pool:

        def work(i: int) -> int:
            with lock:
                started.append(i)
            if i == 3:
                raise ValueError("item 3")
            if not pool.one_done.wait(WAIT_S):
                timed_out.append(i)
            return i

        with pytest.raises(ValueError, match="item 3"):
            run_pulled(pool, range(10_000), work, workers=4)
        assert pool.busy() == 0
    assert timed_out == []
    assert sorted(started) == [0, 1, 2, 3]


def test_pulled_returns_once_its_last_item_is_done_not_at_the_next_report() -> None:
    """Results are reported together, at most ``report_every`` after one finished; the last
    worker done ends the wait at once (item 1 finishes only after item 0 was reported, while
    the calling thread waits for the next report, an hour away)."""
    reported = threading.Event()
    seen: list[int] = []

    def work(i: int) -> int:
        if i == 1 and not reported.wait(WAIT_S):
            raise AssertionError("item 0 never reported")
        return i

    def on_result(item: int, _: int) -> None:
        seen.append(item)
        reported.set()

    with ThreadPoolExecutor(2) as pool:
        caller = threading.Thread(target=run_pulled, args=(pool, range(2), work), kwargs={
            "workers": 2, "on_result": on_result, "report_every": 3600.0}, daemon=True)
        caller.start()
        caller.join(WAIT_S)
        assert not caller.is_alive()
    assert sorted(seen) == [0, 1]


def test_pulled_with_nothing_to_do() -> None:
    with ThreadPoolExecutor(2) as pool:
        run_pulled(pool, [], lambda i: i, workers=2, on_result=lambda *_: None)


def test_prefetched_yields_every_item_in_order_with_reads_ahead() -> None:
    # Item 0's fetch returns only once the rest of the window (items 1 to 3) has started.
    fetch = _Fetch(hold_first=threading.Event(), others_to_start=3)
    with ThreadPoolExecutor(8) as pool:
        got = list(prefetched(pool, range(200), fetch, window=4))
    assert got == [(i, i * 3) for i in range(200)]
    assert fetch.held is True, "no fetch ran ahead while the first one was read"
    assert 1 < fetch.most <= 4


def test_prefetched_raises_a_failed_fetch_in_its_turn_and_leaves_no_fetch_running() -> None:
    fetch = _Fetch(fail_at=5)
    consumed: list[int] = []
    with _Pool(4) as pool:
        with pytest.raises(ValueError, match="item 5"):
            for item, _ in prefetched(pool, range(1000), fetch, window=4):
                consumed.append(item)
        assert pool.busy() == 0  # nothing is still running, or waiting to, behind the caller
        assert len(pool.futures) <= 5 + 4  # never more than the window ahead of the caller
    assert consumed == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("fetched", [prefetched, fetched_as_done])
def test_fetching_left_early_waits_for_the_fetches_in_flight(fetched: Any) -> None:
    fetch = _Fetch()
    with _Pool(4) as pool:
        gen = fetched(pool, range(100), fetch, window=4)
        next(gen)
        gen.close()
        assert pool.busy() == 0  # every fetch it started is over, or was cancelled
        assert len(pool.futures) == 4
    assert len(fetch.finished) <= 4


def test_fetched_as_done_yields_every_item_as_its_fetch_finishes_within_the_window() -> None:
    # The first fetch is in the latency tail: it returns only once the caller holds another
    # item.
    another_taken = threading.Event()
    fetch = _Fetch(hold_first=another_taken)
    got: list[tuple[int, int]] = []
    with ThreadPoolExecutor(8) as pool:
        for pair in fetched_as_done(pool, range(200), fetch, window=4):
            got.append(pair)
            another_taken.set()
    assert sorted(got) == [(i, i * 3) for i in range(200)]
    assert fetch.held is True, "the slow first fetch held back every other item"
    assert got[0] != (0, 0)
    assert 1 < fetch.most <= 4


def test_fetched_as_done_raises_a_failed_fetch_and_leaves_no_fetch_running() -> None:
    # Item 2 fails; the other fetches of the window end only after it, so the failure is
    # among the first results the caller is given, before any further fetch is started.
    with _Pool(4) as pool:
        fetch = _Fetch(fail_at=2, hold_others=pool.done(2))
        with pytest.raises(ValueError, match="item 2"):
            for _ in fetched_as_done(pool, range(1000), fetch, window=4):
                pass
        assert pool.busy() == 0  # nothing is still running, or waiting to, behind the caller
        assert len(pool.futures) == 4
    assert fetch.timed_out == []
