"""More request loops than one for a big commit: worker processes, each with its own loop.

One request loop (``http/loop.py``) is one thread, and Python runs one thread at a time: when
the loop's thread is busy all the time, the commit can send no faster, however many CPUs the
driver has and however many requests the account would take. Then the renames are spread over
**lanes**: the committing process's own loop, and worker processes (``fanout_worker.py``),
each with its own loop, connections and adaptive concurrency, each taking whole rename
batches, each batch to the lane with the fewest renames outstanding.

A worker is started only when it can pay for itself: the loop's thread was busy for at least
``SATURATED`` of each of the last two half-seconds (its own CPU clock, read by
``loop_cpu_seconds``), and at least ``MIN_REMAINING`` renames are still to be sent (a worker
costs a few tenths of a second of CPU to start). Lanes are added up to ``processes`` (the
``store.processes`` setting; 0: as many as the driver has CPUs).

What stays as it is: every batch in a worker runs through a ``ManagedStore`` (retries,
recovery of ambiguous renames, statistics) exactly as in the committing process; the worker's
statistics come back with each batch and are merged into the commit's. First sends are paced
here, by the commit's own rate limiter, whichever lane sends them: one account-wide limit. A
worker that dies takes no rename with it: its outstanding batches are sent again on the
committing process's own loop, where the usual recovery proves which renames had happened.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import IO, Any

from committer import errors
from committer.errors import StoreError, TransientStoreError
from committer.statistics import IOStatistics, Tally
from committer.store.http.loop import loop_cpu_seconds

__all__ = ["MIN_REMAINING", "SATURATED", "FanOut", "read_frame", "write_frame"]

LOG = logging.getLogger("committer.store.fanout")

SATURATED = 0.85
MIN_REMAINING = 20_000
_SAMPLE_S = 0.5
_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 30.0

Entries = Sequence[tuple[str, str, int | None, str | None]]


def write_frame(out: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(struct.pack("!I", len(data)) + data)
    out.flush()


def read_frame(source: IO[bytes]) -> Any:
    """The next message, or ``None`` at the end of the stream."""
    head = source.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack("!I", head)
    data = source.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def error_fields(error: BaseException) -> tuple[str, str, str, bool, float | None]:
    """What crosses the pipe of a failure: its family, message and the retry hints."""
    return (type(error).__name__, str(error), getattr(error, "path", ""),
            bool(getattr(error, "throttled", False)), getattr(error, "retry_after", None))


def _error(fields: tuple[str, str, str, bool, float | None]) -> StoreError:
    name, message, path, throttled, retry_after = fields
    family = getattr(errors, name, None)
    if isinstance(family, type) and issubclass(family, TransientStoreError):
        return family(message, path, throttled=throttled, retry_after=retry_after)
    if isinstance(family, type) and issubclass(family, StoreError):
        return family(message, path)
    return StoreError(f"{name}: {message}", path)


class _ProcessLane:
    """One worker process; batches go down its standard input, answers come back on a
    reader thread."""

    def __init__(self, location: str, config: Any) -> None:
        self.pending = 0  # renames sent and not yet answered
        self._futures: dict[int, tuple[Future[Tally], Entries]] = {}
        self._lock = threading.Lock()
        self._next = 0
        self.alive = True
        self.process = subprocess.Popen(
            [sys.executable, "-m", "committer.store.fanout_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in: IO[bytes] = self.process.stdin
        self._out: IO[bytes] = self.process.stdout
        write_frame(self._in, ("open", location, config))
        answer = read_frame(self._out)
        if answer is None or answer[0] != "ready":
            self.stop()
            detail = _error(answer[2]) if answer is not None and answer[0] == "failed" else None
            raise StoreError(f"a worker process could not open {location}: {detail}")
        self._reader = threading.Thread(target=self._read, name="committer-fanout-reader",
                                        daemon=True)
        self._reader.start()

    def tail_begins(self) -> None:
        """Tell the worker that the commit's last renames are being sent (its backend's
        ``tail_begins``); a worker already gone is not told."""
        with self._lock:
            if not self.alive:
                return
            try:
                write_frame(self._in, ("tail",))
            except OSError:
                self.alive = False

    def submit(self, entries: Entries) -> Future[Tally]:
        future: Future[Tally] = Future()
        with self._lock:
            if not self.alive:
                raise StoreError("the worker process has stopped")
            batch, self._next = self._next, self._next + 1
            self._futures[batch] = (future, entries)
            self.pending += len(entries)
            try:
                write_frame(self._in, ("batch", batch, list(entries)))
            except OSError:
                self.alive = False
                self._futures.pop(batch)
                self.pending -= len(entries)
                raise StoreError("the worker process has stopped") from None
        return future

    def _read(self) -> None:
        while True:
            try:
                message = read_frame(self._out)
            except (OSError, pickle.UnpicklingError, EOFError):
                message = None
            if message is None:
                break
            kind, batch = message[0], message[1]
            with self._lock:
                found = self._futures.pop(batch, None)
                if found is not None:
                    self.pending -= len(found[1])
            if found is None:
                continue
            future = found[0]
            if kind == "done":
                future.set_result(message[2])
            else:
                error = _error(message[2])
                error.tally = message[3]  # type: ignore[attr-defined]
                future.set_exception(error)
        with self._lock:  # the worker is gone: whatever it had is to be sent again
            self.alive = False
            lost, self._futures = list(self._futures.values()), {}
            self.pending = 0
        for future, _ in lost:
            future.set_exception(_WorkerLost())

    def stop(self) -> None:
        with self._lock:
            self.alive = False
        try:
            write_frame(self._in, ("stop",))
            self._in.close()
        except OSError:
            pass
        try:
            self.process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(_STOP_TIMEOUT_S)


class _WorkerLost(Exception):
    """A worker process ended with a batch outstanding."""


class FanOut:
    """The lanes of one rename stage; ``rename_batch`` is what ``ManagedStore`` calls.

    It is given what it needs of the store: ``pace`` (take permits from the commit's rate
    limiter), ``here`` (rename a batch on this process's own loop, already paced),
    ``stats`` (where the workers' statistics go) and ``worker_config`` (what a worker opens
    the store with)."""

    def __init__(self, location: str, total: int, processes: int, *,
                 pace: Callable[[int], None], here: Callable[[Entries], None],
                 stats: IOStatistics, worker_config: Callable[[], Any]) -> None:
        self.location = location
        self.processes = max(1, processes)
        self.lanes: list[_ProcessLane] = []
        self._pace = pace
        self._here = here
        self._stats = stats
        self._worker_config = worker_config
        self._local_pending = 0
        self._sent = 0
        self._total = total
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.started = 0  # worker processes started (statistics)
        self._tail = False  # the commit's last renames are being sent
        self._monitor = threading.Thread(target=self._watch, name="committer-fanout",
                                         daemon=True)
        self._monitor.start()

    def rename_batch(self, entries: Entries) -> None:
        self._pace(len(entries))  # first sends: the commit's one rate limit
        with self._lock:
            self._sent += len(entries)
            lane = min(self.lanes, key=lambda x: x.pending, default=None)
            use_local = lane is None or not lane.alive or self._local_pending <= lane.pending
            if use_local:
                self._local_pending += len(entries)
        if not use_local:
            assert lane is not None
            if self._in_worker(lane, entries):
                return
            with self._lock:
                self._local_pending += len(entries)
        try:
            self._here(entries)
        finally:
            with self._lock:
                self._local_pending -= len(entries)

    def tail_begins(self) -> None:
        """The commit's last renames are being sent: every worker's backend races their
        tail, as the committing process's does (a worker started later is told at start)."""
        with self._lock:
            self._tail = True
            lanes = list(self.lanes)
        for lane in lanes:
            lane.tail_begins()

    def _in_worker(self, lane: _ProcessLane, entries: Entries) -> bool:
        """Rename ``entries`` in ``lane``'s process: ``True`` when done there, ``False`` when
        the worker is gone (the caller sends them again here); a rename's failure is
        raised, with the worker's statistics of the batch merged first."""
        try:
            future = lane.submit(entries)
        except StoreError:
            return False
        try:
            tally = future.result()
        except _WorkerLost:
            LOG.warning("a worker process of the commit ended; its renames are sent again "
                        "by the committing process")
            return False
        except StoreError as e:
            self._stats.merge(getattr(e, "tally", Tally()))
            raise
        self._stats.merge(tally)
        return True

    def _watch(self) -> None:
        """Start a worker when the loop is saturated and enough renames are left."""
        last_cpu, last = loop_cpu_seconds(), time.monotonic()
        hot = 0
        while not self._stopped.wait(_SAMPLE_S):
            cpu, now = loop_cpu_seconds(), time.monotonic()
            if cpu is None or last_cpu is None:
                last_cpu, last = cpu, now
                continue
            busy = (cpu - last_cpu) / max(now - last, 1e-6)
            last_cpu, last = cpu, now
            hot = hot + 1 if busy >= SATURATED else 0
            with self._lock:
                remaining = self._total - self._sent
                room = 1 + len(self.lanes) < self.processes
            if hot >= 2 and room and remaining >= MIN_REMAINING:
                hot = 0
                self._start_lane()

    def _start_lane(self) -> None:
        try:
            lane = _ProcessLane(self.location, self._worker_config())
        except (StoreError, OSError, pickle.PicklingError) as e:
            LOG.warning("no worker process for the commit's renames: %s", e)
            self.processes = 1 + len(self.lanes)  # do not try again
            return
        with self._lock:
            self.lanes.append(lane)
            self.started += 1
            tail = self._tail
        if tail:
            lane.tail_begins()
        LOG.info("request loop saturated: worker process %d started for the renames",
                 lane.process.pid)

    def close(self) -> None:
        self._stopped.set()
        self._monitor.join()
        for lane in self.lanes:
            lane.stop()


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
