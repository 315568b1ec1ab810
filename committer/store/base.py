"""The storage interface every backend implements, and the status record it returns.

Backends are deliberately small and honest: they do one request per call and translate their
failures into the families of :mod:`committer.errors` (``PathNotFoundError``, ``PathExistsError``,
``TransientStoreError`` for anything a retry may cure). Retries, rate limits, statistics and
fault injection are layered on top (``managed/``, ``faults.py``), never inside a backend; the
cloud backends only offer a hook at the wire where ``faults.HttpFaults`` plugs in.

Paths are *locations*: absolute OS paths on local disk, ``scheme://...`` URLs elsewhere.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from committer.errors import PathNotFoundError, StoreError


@dataclass(frozen=True, slots=True)
class FileStatus:
    path: str
    size: int
    is_dir: bool
    etag: str | None = None
    modified: float | None = None  # seconds since the epoch, when the store says
    # A content checksum the store keeps when it copies an object ("md5:<hex>",
    # "crc32c:<base64>"); it identifies a file across a copy+delete rename that changes the etag.
    checksum: str | None = None


#: prefixes of identities that are content checksums rather than etags (see ``Store.identity``)
CHECKSUM_PREFIXES = ("md5:", "crc32c:")

#: (source, destination, size, identity): a file of a job's plan, as ``identify_sources`` takes it
SourceEntry = tuple[str, str, int, str | None]
#: a file's recorded ``(size, identity)``: what proves a rename of it done (``proves_rename``)
Identity = tuple[int | None, str | None]


def identified_by_listing(store: Store, root: str, listing: Iterable[FileStatus],
                          entries: Sequence[SourceEntry]
                          ) -> tuple[list[SourceEntry], list[tuple[int, int | None]]]:
    """``Store.identify_sources`` from a listing of every file below ``root``."""
    prefix = root.rstrip("/") + "/"
    cut = len(prefix)
    found = {f.path[cut:]: f for f in listing if not f.is_dir and f.path.startswith(prefix)}
    out: list[SourceEntry] = []
    mismatches: list[tuple[int, int | None]] = []
    for i, entry in enumerate(entries):
        src, dst, size, ident = entry
        if ident is not None:
            out.append(entry)
            continue
        f = found.get(src[cut:]) if src.startswith(prefix) else None
        if f is None or f.size != size:
            mismatches.append((i, None if f is None else f.size))
            out.append(entry)
            continue
        out.append((src, dst, size, store.identity(f)))
    return out, mismatches


class UploadOnClose(io.BytesIO):
    """A writable binary stream whose content is stored as one object when it is closed.

    Object stores have no open-append-close files; task output written through
    ``Store.open_write`` is gathered in memory and uploaded by ``upload`` at ``close()`` (one
    request, so a reader never sees part of it). Not for outputs larger than memory."""

    def __init__(self, upload: Callable[[bytes], None]) -> None:
        super().__init__()
        self._upload: Callable[[bytes], None] | None = upload

    def close(self) -> None:
        upload, self._upload = self._upload, None
        if upload is not None and not self.closed:
            try:
                upload(self.getvalue())
            finally:
                super().close()
            return
        super().close()


class Store(ABC):
    """One filesystem or object store, reached by locations under it."""

    #: short name for reports ("local", "gs", "abfs", ...)
    name: str = "store"
    #: the store gives files etags
    supports_etags: bool = False
    #: a rename keeps the etag, so an etag proves a destination is the renamed source
    rename_keeps_etag: bool = False

    @abstractmethod
    def stat(self, path: str) -> FileStatus:
        """Status of a file or directory; ``PathNotFoundError`` if absent."""

    @abstractmethod
    def list_dir(self, path: str) -> list[FileStatus]:
        """Immediate children; ``PathNotFoundError`` if the directory is absent."""

    def list_dir_or_empty(self, path: str) -> list[FileStatus]:
        """Immediate children, ``[]`` when nothing is below ``path``: for a caller to whom
        no directory and an empty one are the same. An object store then lists only, without
        the status that tells the two apart (a round trip; it finds nothing below a file
        either, where ``list_dir`` refuses one)."""
        try:
            return self.list_dir(path)
        except PathNotFoundError:
            return []

    @abstractmethod
    def mkdirs(self, path: str) -> None:
        """Create a directory and its parents; existing directories are fine, a file is
        ``PathExistsError``."""

    @abstractmethod
    def rename_file(self, src: str, dst: str) -> None:
        """Move one file, never replacing: ``PathExistsError`` if ``dst`` exists,
        ``PathNotFoundError`` if ``src`` (or ``dst``'s parent, on a filesystem) is absent."""

    @abstractmethod
    def replace_file(self, src: str, dst: str) -> None:
        """Move one file over whatever is at ``dst`` (last writer wins)."""

    @abstractmethod
    def delete_file(self, path: str) -> bool:
        """Delete one file; ``False`` if it was not there."""

    @abstractmethod
    def delete_tree(self, path: str) -> bool:
        """Delete a directory and everything below it; ``False`` if it was not there."""

    @abstractmethod
    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        """The whole file; a ``StoreError`` if it is larger than ``limit`` bytes."""

    @abstractmethod
    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        """Write a whole file (parents created as needed); with ``exclusive``, a
        ``PathExistsError`` if it exists, decided atomically by the store."""

    #: True when ``walk_files`` is one flat listing of the prefix (object stores), fetched whole
    #: before it yields: the managed store can then retry it like any single operation.
    flat_walk: bool = False

    #: True when ``write_bytes`` stores the whole file in one request that readers see done
    #: or not at all (an object upload): an atomic save then needs no temporary file.
    writes_whole: bool = False

    #: True when the service limits requests per account or bucket and refuses the excess
    #: (Azure, GCS): a commit that sets no static rate cap then takes
    #: ``config.DEFAULT_CLOUD_RATE_LIMIT`` (local disk and the rest: no cap unless set).
    account_rate_limited: bool = False

    #: True when ``rename_batch`` runs its renames concurrently (async cloud backends): it then
    #: attempts every entry, and the managed store paces the batch as a whole.
    native_batches: bool = False

    #: True when removing an empty directory is one cheap call (local disk): the rename stage
    #: then prunes emptied task directories as it goes (``rmdir_run``), instead of cleanup
    #: deleting their trees later.
    prunes_empty_dirs: bool = False

    #: True when ``rename_dir`` moves a whole directory in one atomic, cheap call that never
    #: replaces (local disk; ADLS Gen2 with a hierarchical namespace): job commit may then move
    #: a task's new partition directory whole instead of file by file.
    renames_directories: bool = False

    def rename_dir(self, src: str, dst: str) -> None:
        """Move the directory ``src`` (and everything below it) to ``dst`` in one atomic call,
        never replacing: ``PathExistsError`` if ``dst`` exists (even empty),
        ``PathNotFoundError`` if ``src`` or ``dst``'s parent is absent. Only where
        ``renames_directories`` is declared."""
        raise StoreError(f"{self.name} cannot rename a directory in one call: {src}", src)

    def rename_batch(self, entries: Sequence[tuple[str, str, Any, Any]],
                     start: int = 0) -> tuple[int, list[tuple[int, StoreError]]]:
        """Rename ``entries[start:]`` (source and destination first in each, never replacing).

        Returns ``(reached, failures)``: every entry before index ``reached`` was attempted,
        and ``failures`` holds ``(index, error)`` for each that failed, translated into the
        engine's error families. A sequential backend stops at its first failure (the caller
        goes on from ``reached``); a concurrent one attempts them all. Default: ``rename_file``
        one by one."""
        for i in range(start, len(entries)):
            try:
                self.rename_file(entries[i][0], entries[i][1])
            except StoreError as e:
                return i + 1, [(i, e)]
        return len(entries), []

    def rmdir_run(self, paths: Sequence[str]) -> int:
        """Remove each directory of ``paths`` in order (children first) that is empty; a
        missing or non-empty one is skipped. Returns how many were removed."""
        removed = 0
        for path in paths:
            try:
                if self.exists(path) and self.remove_dir_if_empty(path):
                    removed += 1
            except StoreError:
                continue
        return removed

    def list_names(self, path: str) -> list[str]:
        """The names of ``path``'s immediate children (no status needed); ``PathNotFoundError``
        if it is absent."""
        return [st.path.rstrip("/").rpartition("/")[2] for st in self.list_dir(path)]

    def child_sizes(self, path: str) -> dict[str, int | None]:
        """``name -> size`` of ``path``'s immediate children (``None``: a directory), all the
        checks of a directory need (no etag, time or checksum); ``PathNotFoundError`` if it is
        absent. Default: one listing."""
        return {st.path.rstrip("/").rpartition("/")[2]: None if st.is_dir else st.size
                for st in self.list_dir(path)}

    def count_children(self, path: str) -> int:
        """How many immediate children ``path`` has; ``PathNotFoundError`` if it is absent."""
        return len(self.list_names(path))

    def directory_holds(self, path: str, files: Mapping[str, int | None],
                        side_file: Callable[[str], str] | None = None) -> int | None:
        """How many children ``path`` has, when they are exactly the regular files ``files``
        (``name -> size``; ``None``: any size) and, for any of them, at most its
        ``side_file(name)``, a regular file too; ``None`` when anything else is there, a file
        is missing or of another size, or ``path`` is absent (other failures to list it are
        raised, so that a transient one is retried). Default: one listing."""
        try:
            found = self.child_sizes(path)
        except PathNotFoundError:
            return None
        for name, size in files.items():
            if name not in found:
                return None
            got = found[name]
            if got is None or (size is not None and got != size):
                return None
        if len(found) == len(files):
            return len(found)
        if side_file is None:
            return None
        sides = {side_file(name) for name in files} - files.keys()
        extra = found.keys() - files.keys()
        if not extra <= sides or any(found[name] is None for name in extra):
            return None
        return len(found)

    #: True when ``identify_sources`` costs one stat per source however the sources are
    #: grouped (local disk): job commit then hands it many task attempts at once, under their
    #: common directory. Elsewhere it is one listing of its root, made per task attempt.
    identifies_by_stat: bool = False

    def identify_sources(self, root: str, entries: Sequence[SourceEntry]
                         ) -> tuple[list[SourceEntry], list[tuple[int, int | None]]]:
        """``entries`` (source below ``root``, destination, size, identity), each that has no
        identity given the one its source has now (``identity``), and the mismatches:
        ``(index, size found)`` for each source that is not a file of its entry's size (the size
        ``None``: missing, or not a regular file). A file the store reports no identity for
        keeps ``None`` and is no mismatch. Entries with an identity are not examined.
        Default: one walk of ``root`` (``walk_files``: one paged listing on object stores)."""
        return identified_by_listing(self, root, self.walk_files(root), entries)

    def directory_holds_names(self, path: str, names: Sequence[str],
                              side_file: Callable[[str], str] | None = None) -> int | None:
        """``directory_holds`` for files whose sizes the caller has proven already: how many
        children ``path`` has when they are exactly the files ``names`` and, beside any of
        them, at most its ``side_file``; ``None`` otherwise. One listing, no stat per file
        where the store can tell a file's kind from the listing."""
        return self.directory_holds(path, dict.fromkeys(names), side_file)

    def identity(self, status: FileStatus) -> str | None:
        """What a task should record (the manifest's ``e`` field) so that job commit can later
        prove a destination *is* this file after an ambiguous rename: the etag where this
        store's rename keeps it, else the content checksum the store keeps across a copy."""
        if self.rename_keeps_etag or status.checksum is None:
            return status.etag
        return status.checksum

    def proves_rename(self, found: FileStatus, size: int | None, expected: str | None) -> bool:
        """True when ``found`` (at a rename's destination, its source gone) provably is the
        renamed file whose recorded identity is ``expected`` and length ``size``."""
        if expected is None or found.is_dir or (size is not None and found.size != size):
            return False
        if expected.startswith(CHECKSUM_PREFIXES):
            return found.checksum == expected
        return self.rename_keeps_etag and found.etag == expected

    def open_write(self, path: str) -> BinaryIO:
        """A binary stream writing a new file at ``path`` (parents created as needed)."""
        import fsspec

        stream: BinaryIO = fsspec.open(path, "wb").open()
        return stream

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except PathNotFoundError:
            return False
        return True

    def stat_many(self, paths: Sequence[str], directories: bool = False
                  ) -> list[FileStatus | StoreError | None]:
        """The status of each of ``paths``, in order: ``None`` where nothing is there, the
        error where the call failed (each path on its own). Default: ``stat`` one by one;
        a backend whose calls wait on a request loop asks for them all at once.
        ``directories``: the paths are expected to be directories (a flat object store asks
        what is below each beside its object, one round trip where it would take two)."""
        out: list[FileStatus | StoreError | None] = []
        for path in paths:
            try:
                out.append(self.stat(path))
            except PathNotFoundError:
                out.append(None)
            except StoreError as e:
                out.append(e)
        return out

    def remove_dir_if_empty(self, path: str) -> bool:
        """Remove ``path`` only if it has no children; ``True`` if it is gone afterwards."""
        try:
            if self.list_dir(path):
                return False
        except PathNotFoundError:
            return True
        self.delete_tree(path)
        return True

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        """Every file below ``root``, by a recursive tree walk (never a deep listing API)."""
        pending = [root]
        while pending:
            here = pending.pop()
            for st in self.list_dir(here):
                if st.is_dir:
                    pending.append(st.path)
                else:
                    yield st

    def reads_wait(self, path: str) -> bool:
        """Whether reading files under ``path`` may wait on a network or device, so that
        reading many ahead on threads pays. Remote stores: always."""
        return True

    def calls_at_once(self) -> int:
        """How many calls made from threads this store serves at once while each only waits
        on its service (a cloud backend's request loop: its concurrency), so that a commit
        pays to make them from more threads than ``io.threads``; 0 when a call holds a CPU
        or a device while it runs."""
        return 0

    def expect_requests(self, requests: int) -> None:
        """A commit is about to send about ``requests`` requests at once (its renames): a
        backend whose concurrency adapts starts there, not at a slow start meant for a
        million (``http/limiter.py``, ``AdaptiveLimit.expect``), and races the latency tail of
        a small commit (``http/hedge.py``). Nothing elsewhere."""
        del requests  # nothing to prepare

    def tail_begins(self) -> None:
        """The commit's last renames are being sent (``TAIL_RACED``, after
        ``expect_requests``): a backend that races a small commit's latency tail races
        these too, since the stage ends with their slowest. Nothing elsewhere."""
        return

    def fanout_options(self) -> Mapping[str, Any] | None:
        """Storage options a worker process adds to open this store as it is here (what this
        backend found out, so the worker need not ask again), or ``None`` when the store
        cannot be opened in a worker process to share a commit's renames (``fanout.py``)."""
        return None

    def commit_begins(self) -> None:
        """A job commit begins on this store: a backend that races its requests' latency
        tail takes the percentile and the budget of its races from this commit's requests
        alone (``http/hedge.py``). Nothing elsewhere."""
        return

    def take_request_counters(self) -> dict[str, int]:
        """The requests this backend sent since the last call (or since the commit began),
        with Hadoop-style names (``store_io_request``, its raced copies: ``statistics.py``);
        empty for a store that sends none of its own (local disk)."""
        return {}

    def take_counters(self) -> dict[str, int]:
        """Counts of the backend's own events since the last call (such as GCS batches the
        service refused as a whole, sent again call by call), which the managed store adds to
        its statistics after each batch of renames and each tree delete."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release connections and threads."""
