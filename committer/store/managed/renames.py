"""The renames of the managed store, with the recoveries of the ambiguous ones.

Renames get the two recoveries Hadoop learned the hard way:
- HADOOP-18012/18002: a rename that timed out may have happened. When a retry finds the source
  gone, the destination counts as the renamed file only if the store can prove it (an etag kept
  by the rename, equal to the manifest's); otherwise ``AmbiguousRenameError``, never silence.
- HADOOP-18242: under load a store may briefly report the destination's parent missing; the
  parent is re-created and the rename tried once more.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from committer import statistics as st
from committer.config import CommitterConfig
from committer.errors import (
    AmbiguousRenameError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
)
from committer.statistics import Tally
from committer.store.base import FileStatus
from committer.store.managed.calls import PacedCalls, _asked_wait

#: a commit's last renames, raced in their tail whatever its size: about the last two seconds
#: at the default rate cap, one at an account's rate. A stage ends with its slowest request;
#: a request that draws a second from the far tail is one in tens of thousands.
TAIL_RACED = 20_000


def _parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


class RecoveringRenames(PacedCalls):
    """Renames one at a time, in batches, or spread over worker processes, each failure
    recovered as the module doc says."""

    def rename_file(
        self, src: str, dst: str, *, size: int | None = None, etag: str | None = None
    ) -> None:
        """Rename one file without replacing anything, recovering as the module doc says."""
        self._pace(st.OP_RENAME)
        t0 = time.perf_counter()
        try:
            self.backend.rename_file(src, dst)
        except (TransientStoreError, PathNotFoundError) as e:
            self.stats.timed(st.OP_RENAME, time.perf_counter() - t0, failed=True)
            if isinstance(e, TransientStoreError):
                self.stats.incr(st.STORE_IO_THROTTLED)
                self._honour(e, st.OP_RENAME)
            self._rename_slow_path(src, dst, size, etag)
            return
        except StoreError:
            self.stats.timed(st.OP_RENAME, time.perf_counter() - t0, failed=True)
            raise
        self.stats.timed(st.OP_RENAME, time.perf_counter() - t0)

    @contextmanager
    def fanned_out(self, location: str, entries: int) -> Iterator[None]:
        """While the block runs, ``rename_batch`` may spread batches over worker processes
        with request loops of their own (``fanout.py``), when this store's loop is saturated:
        only on backends that can be reopened in a worker (``Store.fanout_options``), with
        more than one CPU and at least ``fanout.MIN_REMAINING`` renames to do, unless the
        ``store.processes`` setting is 1. Their statistics are merged into this store's."""
        from committer.store import fanout

        processes = self.config.store_processes or fanout.cpus()
        if (self._fanout is not None or processes <= 1 or entries < fanout.MIN_REMAINING
                or not self.backend.native_batches or self.backend.fanout_options() is None):
            yield
            return
        fan = fanout.FanOut(location, entries, processes,
                            pace=lambda n: self._pace_many(n, st.OP_RENAME),
                            here=lambda batch: self._rename_batch_here(batch, paced=True),
                            stats=self.stats, worker_config=self.worker_config)
        self._fanout = fan
        try:
            yield
        finally:
            self._fanout = None
            fan.close()
            self.stats.incr(st.STORE_PROCESSES_STARTED, fan.started)

    def worker_config(self) -> CommitterConfig:
        """The configuration a worker process opens this store with: the backend's own
        findings added (``Store.fanout_options``), and no rate limit of its own (this store
        paces every batch before it is handed over)."""
        extra = self.backend.fanout_options() or {}
        return dataclasses.replace(self.config, io_rate_limit=0,
                                   storage_options={**self.config.storage_options, **extra})

    def rename_batch(self, entries: Sequence[tuple[str, str, int | None, str | None]]) -> None:
        """Rename ``(src, dst, size, etag)`` entries; raises the first failure that no retry
        or recovery cured.

        With no rate limit, a local rename is one short system call, and per-file timing,
        statistics and calls through the layers would cost as much again in CPU and GIL
        hand-offs: the backend loops over the batch (``Store.rename_batch``), timed as a whole,
        and each failure takes the same recovery path as in ``rename_file``. Under a rate
        limit a sequential backend is paced per file; a concurrent one per batch."""
        fan = self._fanout
        if self._reaches_tail(len(entries)):
            self.backend.tail_begins()
            if fan is not None:
                fan.tail_begins()
        if fan is not None:
            fan.rename_batch(entries)
            return
        self._rename_batch_here(entries)

    def _reaches_tail(self, renames: int) -> bool:
        """Count ``renames`` handed in; true once, for the batch that reaches the commit's
        last ``TAIL_RACED`` (a commit of more than ``SMALL_COMMIT`` races only those)."""
        with self._tail_lock:
            if self._before_tail is None:
                return False
            self._before_tail -= renames
            if self._before_tail > TAIL_RACED:
                return False
            self._before_tail = None
            return True

    def _rename_batch_here(self, entries: Sequence[tuple[str, str, int | None, str | None]],
                           paced: bool = False) -> None:
        """``rename_batch`` on this process's own backend (``paced``: the batch has had its
        permits from the rate limiter already)."""
        backend = self.backend
        if self.limiter is not None and not backend.native_batches:
            for src, dst, size, etag in entries:
                self.rename_file(src, dst, size=size, etag=etag)
            return
        clock = time.perf_counter
        tally = Tally()
        i, n = 0, len(entries)
        try:
            while i < n:
                if backend.native_batches and not paced:
                    self._pace_many(n - i, st.OP_RENAME)
                t0 = clock()
                reached, failures = backend.rename_batch(entries, i)
                tally.timed_many(st.OP_RENAME, reached - i - len(failures), clock() - t0)
                again = self._settle(entries, failures, tally)
                if again:
                    self._send_again(entries, again, tally)
                i = reached
        finally:
            for name, count in backend.take_counters().items():
                tally.incr(name, count)
            self.stats.merge(tally)

    def _settle(self, entries: Sequence[tuple[str, str, int | None, str | None]],
                failures: Sequence[tuple[int, StoreError]],
                tally: Tally) -> list[tuple[int, TransientStoreError]]:
        """Deal with a batch's failures. On a backend that renames in batches each transient
        one (refused: throttled, the service did not do it; or its answer lost: done or not)
        is returned, to be sent again with the others as a batch: a batch settles each entry
        as ``rename_file`` would, an earlier attempt's copy at the destination proven and
        completed, a source gone reported missing. Elsewhere, and for a missing source, the
        slow path of ``rename_file``; anything else is raised."""
        again: list[tuple[int, TransientStoreError]] = []
        missing: list[tuple[str, str, int | None, str | None]] = []
        for index, error in failures:
            tally.timed(st.OP_RENAME, 0.0, failed=True)
            if isinstance(error, TransientStoreError):
                # a throttled request inside a batch counts as one anywhere else does
                tally.incr(st.STORE_IO_THROTTLED)
                if self.backend.native_batches:
                    again.append((index, error))
                    continue
            elif not isinstance(error, PathNotFoundError):
                raise error
            missing.append(entries[index])
        self._recover_missing(missing)
        return again

    def _recover_missing(self, entries: Sequence[tuple[str, str, int | None, str | None]]
                         ) -> None:
        """The renames of a batch that found no source (or, rarely, no destination parent):
        on a backend that renames in batches, every source and destination is looked up at
        once and each settled as ``rename_file``'s slow path would; a resumed commit meets one
        such entry per file its first attempt renamed, and one by one they took a round trip
        each, two hundred to a chunk. Elsewhere, and for a source that is there, that slow
        path."""
        if len(entries) < 2 or not self.backend.native_batches:
            for src, dst, size, etag in entries:
                self._rename_slow_path(src, dst, size, etag)
            return
        found = self.stat_many([e[0] for e in entries] + [e[1] for e in entries])
        n = len(entries)
        for k, (src, dst, size, etag) in enumerate(entries):
            if found[k] is not None:
                self._rename_slow_path(src, dst, size, etag)
            else:
                self._prove_renamed(src, dst, size, etag, found[n + k])

    def _send_again(self, entries: Sequence[tuple[str, str, int | None, str | None]],
                    pending: list[tuple[int, TransientStoreError]], tally: Tally) -> None:
        """Send the entries whose batch failed transiently again, together, after a backoff
        as long as the service asked at least: with the retries of the managed store's policy
        (a round with a lost answer counts against ``retry_attempts``, one of refusals alone
        against ``retry_throttled_attempts``), but one batch per round rather than one call
        per file, so that a throttled batch of a thousand renames does not turn into a
        thousand sequential round trips, nor a lost answer to a batch of a hundred into a
        hundred."""
        cfg = self.config
        rounds = {"refused": 0, "other": 0}  # rounds of refusals alone, and the others
        while True:
            rounds["refused" if all(e.throttled for _, e in pending) else "other"] += 1
            if (rounds["other"] > cfg.retry_attempts
                    or rounds["refused"] > cfg.retry_throttled_attempts):
                raise pending[0][1]
            attempt = rounds["refused"] + rounds["other"]
            bound = min(cfg.retry_max_delay_ms / 1000.0,
                        cfg.retry_initial_delay_ms / 1000.0 * 2 ** min(attempt, 30))
            asked = max(_asked_wait(error, cfg) for _, error in pending)
            tally.incr(st.STORE_IO_RETRY)
            wait = max(random.uniform(0, bound), asked)
            time.sleep(wait)
            if any(e.throttled for _, e in pending):
                self._backed_off(st.OP_RENAME, wait)
            again = [entries[index] for index, _ in pending]
            self._pace_many(len(again), st.OP_RENAME)
            t0 = time.perf_counter()
            _, failures = self.backend.rename_batch(again, 0)
            tally.timed_many(st.OP_RENAME, len(again) - len(failures), time.perf_counter() - t0)
            still = self._settle(again, failures, tally)
            if not still:
                return
            pending = [(pending[k][0], error) for k, error in still]

    def _rename_slow_path(self, src: str, dst: str, size: int | None, etag: str | None) -> None:
        parent_retried = False
        for attempt in self._retrying(st.OP_RENAME):
            with attempt:
                self._pace(st.OP_RENAME)
                if not self.backend.exists(src):
                    self._recover_vanished_source(src, dst, size, etag)
                    return
                t0 = time.perf_counter()
                try:
                    self.backend.rename_file(src, dst)
                except PathNotFoundError:
                    self.stats.timed(st.OP_RENAME, time.perf_counter() - t0, failed=True)
                    if parent_retried:
                        raise
                    parent_retried = True  # HADOOP-18242: recreate the parent, try once more
                    self.backend.mkdirs(_parent(dst))
                    t0 = time.perf_counter()
                    self.backend.rename_file(src, dst)
                except StoreError:
                    self.stats.timed(st.OP_RENAME, time.perf_counter() - t0, failed=True)
                    raise
                self.stats.timed(st.OP_RENAME, time.perf_counter() - t0)
                return

    def _recover_vanished_source(
        self, src: str, dst: str, size: int | None, etag: str | None
    ) -> None:
        try:
            found = self.backend.stat(dst)
        except PathNotFoundError:
            found = None
        self._prove_renamed(src, dst, size, etag, found)

    def _prove_renamed(self, src: str, dst: str, size: int | None, etag: str | None,
                       found: FileStatus | None) -> None:
        """The source is gone: the rename counts as done only if ``found``, what stands at
        the destination, provably is the file."""
        if found is None:
            raise PathNotFoundError(f"rename source not found and destination absent: {src}",
                                    src)
        # The backend decides what proves identity: a kept etag, or a content checksum where
        # its rename is a copy that changes the etag (Azure Blob without a namespace).
        proven = self.backend.proves_rename(found, size, etag)
        if not proven:
            raise AmbiguousRenameError(
                f"rename of {src} to {dst} was retried, the source is gone and the destination "
                f"cannot be proven to be it (expected etag {etag!r}, size {size}; found etag "
                f"{found.etag!r}, size {found.size})",
                dst,
            )
        self.stats.incr(st.RENAME_RECOVERED)
