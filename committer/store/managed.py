"""The store every stage uses: a backend plus statistics, retries and a rate limit.

On success an operation costs one backend call and two clock reads; tenacity is only entered
after a transient failure, so the local fast path pays nothing for resilience it did not need.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    wait_random_exponential,
)

from committer import statistics as st
from committer.config import CommitterConfig
from committer.errors import (
    AmbiguousRenameError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
)
from committer.statistics import Tally
from committer.store.base import (
    FileStatus,
    SourceEntry,
    Store,
    UploadOnClose,
    identified_by_listing,
)
from committer.store.rate_limit import RateLimiter

if TYPE_CHECKING:
    from committer.store.fanout import FanOut

T = TypeVar("T")
_IDENTITY = itemgetter(3)


def _parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


def _asked_wait(error: BaseException | None, config: CommitterConfig) -> float:
    """The wait a throttled answer asked for (``Retry-After``), bounded by the configured
    longest backoff so that a hostile or confused answer cannot stall a commit for hours."""
    asked = getattr(error, "retry_after", None)
    if not isinstance(asked, int | float) or asked <= 0:
        return 0.0
    return min(float(asked), config.retry_max_delay_ms / 1000.0)


class ManagedStore:
    """Wraps a :class:`Store`; every storage access of the engine goes through one of these."""

    def __init__(
        self,
        backend: Store,
        config: CommitterConfig | None = None,
        stats: st.IOStatistics | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.backend = backend
        self.config = config or CommitterConfig()
        self.stats = stats or st.IOStatistics()
        if limiter is None and self.config.io_rate_limit > 0:
            limiter = RateLimiter(self.config.io_rate_limit)
        self.limiter = limiter
        self._fanout: FanOut | None = None

    @property
    def name(self) -> str:
        return self.backend.name

    def with_own_statistics(self) -> ManagedStore:
        """The same backend, configuration and rate limit, counted in statistics of its own:
        the committer's bookkeeping (journal, lease, history) goes through one of these, so a
        job's IOStatistics keep Hadoop's meaning (``op_rename`` counts renamed files)."""
        return ManagedStore(self.backend, self.config, limiter=self.limiter)

    # -- what the backend can do (flags it declares) ---------------------------------------

    @property
    def flat_walk(self) -> bool:
        """A listing of a prefix returns every file below it (object stores): directories
        are only names, so nothing stops a file and a directory sharing one."""
        return self.backend.flat_walk

    @property
    def supports_etags(self) -> bool:
        return self.backend.supports_etags

    @property
    def rename_keeps_etag(self) -> bool:
        return self.backend.rename_keeps_etag

    @property
    def renames_directories(self) -> bool:
        return self.backend.renames_directories

    def proves_rename(self, found: FileStatus, size: int | None, expected: str | None) -> bool:
        """True when ``found`` (at a rename's destination, its source gone) provably is the
        renamed file whose recorded identity is ``expected`` (see ``Store.proves_rename``)."""
        return self.backend.proves_rename(found, size, expected)

    def close(self) -> None:
        """Release the backend's connections (a cloud backend reopens them if used again)."""
        self.backend.close()

    def __enter__(self) -> ManagedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the mechanism -------------------------------------------------------------------------

    def _retrying(self) -> Retrying:
        cfg = self.config

        def counted(state: RetryCallState) -> None:
            self.stats.incr(st.STORE_IO_RETRY)

        # "full jitter": a random wait up to an exponentially growing bound, so clients
        # throttled together do not retry together; never shorter than the service asked
        backoff = wait_random_exponential(
            multiplier=cfg.retry_initial_delay_ms / 1000.0, max=cfg.retry_max_delay_ms / 1000.0)

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            return max(backoff(state), _asked_wait(error, cfg))

        failed = {"refused": 0, "other": 0}

        def stop(state: RetryCallState) -> bool:
            # a refusal (throttled: not done) is the service pacing us; it gets its own,
            # larger budget, so that a store throttled at random does not fail the commit
            error = state.outcome.exception() if state.outcome is not None else None
            throttled = isinstance(error, TransientStoreError) and error.throttled
            failed["refused" if throttled else "other"] += 1
            return (failed["other"] >= cfg.retry_attempts
                    or failed["refused"] >= cfg.retry_throttled_attempts)

        return Retrying(
            stop=stop,
            wait=wait,
            retry=retry_if_exception_type(TransientStoreError),
            before_sleep=counted,
            reraise=True,
        )

    def _honour(self, error: TransientStoreError) -> None:
        """Before the first retry (which tenacity runs at once): the wait the service asked
        for, if it asked (``Retry-After``)."""
        asked = _asked_wait(error, self.config)
        if asked > 0:
            time.sleep(asked)

    def _pace(self) -> None:
        if self.limiter is not None:
            waited = self.limiter.acquire()
            if waited > 0:
                self.stats.timed(st.STORE_IO_RATE_LIMITED, waited)

    def call(self, statistic: str, fn: Callable[[], T]) -> T:
        """Run one store operation with pacing, timing and retries of transient failures."""
        self._pace()
        t0 = time.perf_counter()
        try:
            result = fn()
        except TransientStoreError as e:
            self.stats.timed(statistic, time.perf_counter() - t0, failed=True)
            self.stats.incr(st.STORE_IO_THROTTLED)
            self._honour(e)
            for attempt in self._retrying():
                with attempt:
                    self._pace()
                    t0 = time.perf_counter()
                    try:
                        result = fn()
                    except TransientStoreError:
                        self.stats.timed(statistic, time.perf_counter() - t0, failed=True)
                        raise
            self.stats.timed(statistic, time.perf_counter() - t0)
            return result
        except StoreError:
            self.stats.timed(statistic, time.perf_counter() - t0, failed=True)
            raise
        self.stats.timed(statistic, time.perf_counter() - t0)
        return result

    # -- operations ----------------------------------------------------------------------------

    def stat(self, path: str) -> FileStatus:
        return self.call(st.OP_GET_FILE_STATUS, lambda: self.backend.stat(path))

    def stat_or_none(self, path: str) -> FileStatus | None:
        try:
            return self.stat(path)
        except PathNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        return self.stat_or_none(path) is not None

    def stat_many(self, paths: Sequence[str]) -> list[FileStatus | None]:
        """The status of each of ``paths`` (``None`` where nothing is there), asked at once
        where the backend can (a cloud store's request loop); a path whose call failed
        transiently is asked again alone, with the retries of any other call."""
        if not paths:
            return []
        self._pace_many(len(paths))
        t0 = time.perf_counter()
        found = self.backend.stat_many(paths)
        tally = Tally()
        tally.timed_many(st.OP_GET_FILE_STATUS, len(paths), time.perf_counter() - t0)
        self.stats.merge(tally)
        out: list[FileStatus | None] = []
        for path, status in zip(paths, found, strict=True):
            if isinstance(status, TransientStoreError):
                self.stats.incr(st.STORE_IO_THROTTLED)
                out.append(self.stat_or_none(path))
            elif isinstance(status, StoreError):
                raise status
            else:
                out.append(status)
        return out

    def list_dir(self, path: str) -> list[FileStatus]:
        return self.call(st.OP_LIST_STATUS, lambda: self.backend.list_dir(path))

    def list_names(self, path: str) -> list[str]:
        return self.call(st.OP_LIST_STATUS, lambda: self.backend.list_names(path))

    def count_children(self, path: str) -> int:
        return self.call(st.OP_LIST_STATUS, lambda: self.backend.count_children(path))

    def directory_holds(self, path: str, files: Mapping[str, int | None],
                        side_file: Callable[[str], str] | None = None) -> int | None:
        """``Store.directory_holds``: counted as one listing."""
        return self.call(st.OP_LIST_STATUS,
                         lambda: self.backend.directory_holds(path, files, side_file))

    def directory_holds_names(self, path: str, names: Sequence[str],
                              side_file: Callable[[str], str] | None = None) -> int | None:
        """``Store.directory_holds_names``: counted as one listing."""
        return self.call(st.OP_LIST_STATUS,
                         lambda: self.backend.directory_holds_names(path, names, side_file))

    @property
    def identifies_by_stat(self) -> bool:
        return self.backend.identifies_by_stat

    def identify_sources(self, root: str, entries: Sequence[SourceEntry]
                         ) -> tuple[list[SourceEntry], list[tuple[int, int | None]]]:
        """``Store.identify_sources``. Where that is a stat per source (local disk) it counts
        as that many ``op_get_file_status``; elsewhere it is this store's ``walk_files`` of
        ``root`` (counted and retried as a walk: one ``op_list_status``), matched to the
        entries."""
        if not self.backend.identifies_by_stat:
            try:
                listing = list(self.walk_files(root))
            except PathNotFoundError:
                listing = []  # every source is then missing
            return identified_by_listing(self.backend, root, listing, entries)
        self._pace()
        t0 = time.perf_counter()
        try:
            out = self.backend.identify_sources(root, entries)
        except StoreError:
            self.stats.timed(st.OP_GET_FILE_STATUS, time.perf_counter() - t0, failed=True)
            raise
        tally = Tally()
        tally.timed_many(st.OP_GET_FILE_STATUS, list(map(_IDENTITY, entries)).count(None),
                         time.perf_counter() - t0)
        self.stats.merge(tally)
        return out

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        if self.backend.flat_walk:
            # one listing operation (paged): retried as a whole after throttling, like any call
            yield from self.call(st.OP_LIST_STATUS, lambda: list(self.backend.walk_files(root)))
            return
        # A walk is many listings, timed as one. It is collected before anything is yielded,
        # so that after a transient failure of any listing the walk can be redone, one
        # retried listing at a time, without yielding an entry twice: a single throttled
        # listing must not fail the whole task commit.
        self._pace()
        t0 = time.perf_counter()
        try:
            found = list(self.backend.walk_files(root))
        except TransientStoreError:
            self.stats.timed(st.OP_LIST_STATUS, time.perf_counter() - t0, failed=True)
            self.stats.incr(st.STORE_IO_THROTTLED)
            found = []
            pending = [root]
            while pending:
                for status in self.list_dir(pending.pop()):
                    if status.is_dir:
                        pending.append(status.path)
                    else:
                        found.append(status)
            yield from found
            return
        self.stats.timed(st.OP_LIST_STATUS, time.perf_counter() - t0)
        yield from found

    def mkdirs(self, path: str) -> None:
        self.call(st.OP_MKDIRS, lambda: self.backend.mkdirs(path))

    def delete_file(self, path: str) -> bool:
        return self.call(st.OP_DELETE, lambda: self.backend.delete_file(path))

    def delete_tree(self, path: str) -> bool:
        return self.call(st.OP_DELETE, lambda: self.backend.delete_tree(path))

    def remove_dir_if_empty(self, path: str) -> bool:
        return self.call(st.OP_DELETE, lambda: self.backend.remove_dir_if_empty(path))

    def reads_wait(self, path: str) -> bool:
        """Whether reads under ``path`` may wait (a remote or network store, or a rate limit
        here): then reading ahead on threads pays (see ``Store.reads_wait``)."""
        return self.limiter is not None or self.backend.reads_wait(path)

    def calls_at_once(self) -> int:
        return self.backend.calls_at_once()

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        return self.call(st.OP_READ_FILE, lambda: self.backend.read_bytes(path, limit))

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        self.call(st.OP_SAVE_FILE,
                  lambda: self.backend.write_bytes(path, data, exclusive=exclusive))

    def identity(self, status: FileStatus) -> str | None:
        """What to record for ``status`` so an ambiguous rename can be proven later
        (see ``Store.identity``): the etag, or a content checksum on copy-based stores."""
        return self.backend.identity(status)

    def read_if_exists(self, path: str, limit: int | None = None) -> bytes | None:
        """The whole file, or ``None`` if there is none (the committer's own records)."""
        try:
            return self.read_bytes(path, limit)
        except PathNotFoundError:
            return None

    def open_write(self, path: str) -> BinaryIO:
        if self.backend.writes_whole:
            # An object store stores the stream as one upload when it is closed: that upload
            # is a write like any other, with this store's retries (a connection reset under
            # it failed a task's output).
            return UploadOnClose(lambda data: self.write_bytes(path, data))
        return self.call(st.OP_SAVE_FILE, lambda: self.backend.open_write(path))

    def replace_file(self, src: str, dst: str) -> None:
        self.call(st.OP_RENAME, lambda: self.backend.replace_file(src, dst))

    def rename_dir(self, src: str, dst: str) -> None:
        """Move a whole directory in one call, never replacing (``Store.rename_dir``);
        transient failures are retried, and a retry that finds the source gone raises
        ``PathNotFoundError``: the caller then proves from the destination's listing whether
        the first attempt happened."""
        self.call(st.OP_RENAME_DIRECTORY, lambda: self.backend.rename_dir(src, dst))

    def save_atomic(self, path: str, data: bytes, temp_path: str) -> None:
        """Write ``temp_path`` then move it over ``path``: readers see old or new, never part.
        Where a write is one request seen whole or not at all (``Store.writes_whole``: object
        stores, on which the move would be a copy and a delete besides), ``path`` is written
        directly."""
        if self.backend.writes_whole:
            self.write_bytes(path, data)
            return
        self.write_bytes(temp_path, data)
        self.replace_file(temp_path, path)

    def rename_file(
        self, src: str, dst: str, *, size: int | None = None, etag: str | None = None
    ) -> None:
        """Rename one file without replacing anything, recovering as the module doc says."""
        self._pace()
        t0 = time.perf_counter()
        try:
            self.backend.rename_file(src, dst)
        except (TransientStoreError, PathNotFoundError) as e:
            self.stats.timed(st.OP_RENAME, time.perf_counter() - t0, failed=True)
            if isinstance(e, TransientStoreError):
                self.stats.incr(st.STORE_IO_THROTTLED)
                self._honour(e)
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
        fan = fanout.FanOut(location, entries, processes, pace=self._pace_many,
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
        if fan is not None:
            fan.rename_batch(entries)
            return
        self._rename_batch_here(entries)

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
                    self._pace_many(n - i)
                t0 = clock()
                reached, failures = backend.rename_batch(entries, i)
                tally.timed_many(st.OP_RENAME, reached - i - len(failures), clock() - t0)
                again = self._settle(entries, failures, tally)
                if again:
                    self._send_again(entries, again, tally)
                i = reached
        finally:
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
            time.sleep(max(random.uniform(0, bound), asked))
            again = [entries[index] for index, _ in pending]
            self._pace_many(len(again))
            t0 = time.perf_counter()
            _, failures = self.backend.rename_batch(again, 0)
            tally.timed_many(st.OP_RENAME, len(again) - len(failures), time.perf_counter() - t0)
            still = self._settle(again, failures, tally)
            if not still:
                return
            pending = [(pending[k][0], error) for k, error in still]

    @property
    def prunes_empty_dirs(self) -> bool:
        """True when :meth:`remove_empty_dirs` does anything here."""
        return self.backend.prunes_empty_dirs and self.limiter is None

    def remove_empty_dirs(self, paths: Sequence[str]) -> int:
        """Remove each directory of ``paths`` (in the order given, so children first) that is
        empty; a missing or non-empty one is left alone, never an error. Only on stores where
        that costs one cheap call per directory (``Store.prunes_empty_dirs``); elsewhere it
        does nothing and returns 0, and ``delete_tree`` does the work later. Returns how many
        were removed."""
        if not self.prunes_empty_dirs:
            return 0
        t0 = time.perf_counter()
        removed = self.backend.rmdir_run(paths)
        tally = Tally()
        tally.timed_many(st.OP_DELETE, removed, time.perf_counter() - t0)
        self.stats.merge(tally)
        return removed

    def _pace_many(self, n: int) -> None:
        if self.limiter is None:
            return
        waited, cap = 0.0, max(1, int(self.limiter.rate))
        while n > 0:  # permits beyond one second's burst are taken a second's worth at a time
            take = min(n, cap)
            waited += self.limiter.acquire(take)
            n -= take
        if waited > 0:
                self.stats.timed(st.STORE_IO_RATE_LIMITED, waited)

    def _rename_slow_path(self, src: str, dst: str, size: int | None, etag: str | None) -> None:
        parent_retried = False
        for attempt in self._retrying():
            with attempt:
                self._pace()
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
