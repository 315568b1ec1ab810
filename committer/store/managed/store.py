"""The store every stage uses: a backend plus statistics, retries and a rate limit.

``calls.py`` holds how a call is paced, timed and retried, ``renames.py`` the renames and
their recoveries; here, :class:`ManagedStore` itself: the backend's flags and every other
operation, each one call through that mechanism.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import BinaryIO

from committer import statistics as st
from committer.errors import PathNotFoundError, StoreError, TransientStoreError
from committer.statistics import Tally
from committer.store.base import FileStatus, SourceEntry, UploadOnClose, identified_by_listing
from committer.store.managed.renames import RecoveringRenames

_IDENTITY = itemgetter(3)


class ManagedStore(RecoveringRenames):
    """Wraps a :class:`Store`; every storage access of the engine goes through one of these."""

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

    # -- operations ----------------------------------------------------------------------------

    def list_dir(self, path: str) -> list[FileStatus]:
        return self.call(st.OP_LIST_STATUS, lambda: self.backend.list_dir(path))

    def list_dir_or_empty(self, path: str) -> list[FileStatus]:
        return self.call(st.OP_LIST_STATUS, lambda: self.backend.list_dir_or_empty(path))

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
        try:
            return self.call(st.OP_DELETE, lambda: self.backend.delete_tree(path))
        finally:
            for name, count in self.backend.take_counters().items():
                self.stats.incr(name, count)

    def remove_dir_if_empty(self, path: str) -> bool:
        return self.call(st.OP_DELETE, lambda: self.backend.remove_dir_if_empty(path))

    def reads_wait(self, path: str) -> bool:
        """Whether reads under ``path`` may wait (a remote or network store, or a rate limit
        here): then reading ahead on threads pays (see ``Store.reads_wait``)."""
        return self.limiter is not None or self.backend.reads_wait(path)

    def calls_at_once(self) -> int:
        return self.backend.calls_at_once()

    def commit_begins(self) -> None:
        """A job commit begins on this store (``Store.commit_begins``): its races are
        budgeted, and its requests counted, from here."""
        self.backend.commit_begins()

    def count_requests(self) -> None:
        """Add the requests the backend sent since the last call (or since the commit began)
        to the statistics (``store_io_request`` and its raced copies): the summary's count of
        what the commit sent."""
        for name, count in self.backend.take_request_counters().items():
            self.stats.incr(name, count)

    def expect_requests(self, requests: int) -> None:
        self.backend.expect_requests(requests)
        with self._tail_lock:
            self._before_tail = requests

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

    @property
    def prunes_empty_dirs(self) -> bool:
        """True when :meth:`remove_empty_dirs` does anything here."""
        return self.backend.prunes_empty_dirs

    def remove_empty_dirs(self, paths: Sequence[str]) -> int:
        """Remove each directory of ``paths`` (in the order given, so children first) that is
        empty; a missing or non-empty one is left alone, never an error. Only on stores where
        that costs one cheap call per directory (``Store.prunes_empty_dirs``); elsewhere it
        does nothing and returns 0, and ``delete_tree`` does the work later. Returns how many
        were removed."""
        if not self.prunes_empty_dirs or not paths:
            return 0
        self._pace_many(len(paths), st.OP_DELETE)  # under the cap as every other call
        t0 = time.perf_counter()
        removed = self.backend.rmdir_run(paths)
        tally = Tally()
        tally.timed_many(st.OP_DELETE, removed, time.perf_counter() - t0)
        self.stats.merge(tally)
        return removed

