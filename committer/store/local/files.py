"""Local disk, what is not a rename: the ``os`` calls under ``LocalStore``.

Status, listings, walks, directory creation, deletes, reads and writes, each beneath the
destination where the store was opened for one (``beneath.py``); and the cache of directories
opened beneath it that every rename goes through (``store.py`` holds the renames).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import stat as statmod
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from io import FileIO
from typing import BinaryIO, Literal

from committer.errors import PathExistsError, StoreError, UnsafePathError
from committer.store.base import FileStatus, Store
from committer.store.local.beneath import DIR_FLAGS, FOLLOW_KEY, Beneath, DirectoryCache
from committer.store.local.identity import file_etag
from committer.store.local.os_errors import translate
from manifest_schema.uris import local_path


def _read_within(f: FileIO, limit: int, path: str) -> bytes:
    """All of the unbuffered file ``f``, refusing it once it proves larger than ``limit``. Reads
    are sized by the file, never by the limit: ``read(limit + 1)`` allocates the whole limit
    first (256 MiB for a manifest), which made reading a thousand small manifests six times
    slower than the reads themselves."""
    size = os.fstat(f.fileno()).st_size
    parts: list[bytes] = []
    total = 0
    want = min(size, limit) + 1  # one more: a file grown since fstat shows, and is read on
    while True:
        chunk = f.read(want)
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        if total > limit:
            raise StoreError(f"file is larger than the limit of {limit} bytes: {path}", path)
        want = min(1 << 20, limit + 1 - total)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# Opening never waits (a FIFO without a writer would block the open itself), and a terminal
# never becomes the process's controlling terminal.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_FILE_KINDS = (
    (statmod.S_ISDIR, "a directory"),
    (statmod.S_ISFIFO, "a FIFO (named pipe)"),
    (statmod.S_ISCHR, "a character device"),
    (statmod.S_ISBLK, "a block device"),
    (statmod.S_ISSOCK, "a socket"),
)


def _require_regular(mode: int, path: str) -> None:
    if statmod.S_ISREG(mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
    raise StoreError(f"is {kind}, not a regular file: {path}", path)


# Filesystems whose reads of cached files never wait on a network: for these, reading ahead on
# threads only adds hand-offs (see ``LocalStore.reads_wait``). Anything else (nfs, cifs, fuse,
# lustre, ceph, ...) is assumed to wait.
_LOCAL_FS_TYPES = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "jfs", "reiserfs",
    "tmpfs", "ramfs", "overlay",
})


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def filesystem_type(path: str, mounts_file: str = "/proc/self/mounts") -> str | None:
    """The type of the filesystem holding ``path`` (the longest mount point above it), or
    ``None`` when the mount table cannot be read."""
    target = os.path.realpath(path)
    best, best_type = "", None
    try:
        with open(mounts_file, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # the mount table escapes spaces, tabs, newlines and backslashes as octal
        point = _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, fields[2]
    return best_type


def _cache_capacity() -> int:
    """How many directories a store keeps open: an eighth of the soft limit on open files,
    within 16..1024."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 16
    except (ImportError, OSError, ValueError):
        soft = 1024
    return max(16, min(1024, soft // 8))


def _open_directory(beneath: Beneath | None, path: str) -> int:
    """A new fd of directory ``path``: beneath the root without symbolic links; elsewhere as
    the kernel resolves it. (A function of ``beneath`` alone: the store's directory cache
    holds it, and must not keep the store alive, or its finalizer would never close them.)"""
    parts = beneath.parts(path) if beneath is not None else None
    if parts is not None:
        assert beneath is not None
        return beneath.open_dir(parts)
    try:
        return os.open(path, DIR_FLAGS)
    except ValueError as e:
        raise StoreError(f"{e}: {path!r}", path) from None
    except OSError as e:
        raise translate(e, path) from None


class LocalFiles(Store):
    """What :class:`~committer.store.local.store.LocalStore` does besides renaming, and the
    directory cache its renames go through (opened beneath ``root`` unless
    ``follow_symlinks``)."""

    # Class defaults, so that a subclass whose __init__ does not call this one still works
    # (unchecked, as a store without a root).
    beneath: Beneath | None = None
    _dir_cache: DirectoryCache | None = None
    _pins_per_run = 4
    _init_lock = threading.Lock()

    def __init__(self, root: str | None = None, *, follow_symlinks: bool = False) -> None:
        self.beneath = None if root is None or follow_symlinks else Beneath(local_path(root))
        self._dirs.clear()  # made now, not by the first thread that needs it

    @property
    def _dirs(self) -> DirectoryCache:
        cache = self._dir_cache
        if cache is None:
            with LocalFiles._init_lock:
                cache = self._dir_cache
                if cache is None:
                    opener = functools.partial(_open_directory, self.beneath)
                    cache = self._dir_cache = DirectoryCache(opener, _cache_capacity())
                    # each thread pins at most this many directories at once (fds open =
                    # cache + pins)
                    self._pins_per_run = max(4, min(64, cache.capacity // 4))
                    weakref.finalize(self, cache.clear)
        return cache

    def close(self) -> None:
        self._dirs.clear()

    def stat(self, path: str) -> FileStatus:
        p = local_path(path)
        try:
            st = os.stat(p)
        except OSError as e:
            raise translate(e, p) from None
        is_dir = statmod.S_ISDIR(st.st_mode)
        return FileStatus(p, 0 if is_dir else st.st_size, is_dir,
                          None if is_dir else file_etag(st), st.st_mtime)

    def list_dir(self, path: str) -> list[FileStatus]:
        p = local_path(path)
        out: list[FileStatus] = []
        try:
            with os.scandir(p) as it:
                for entry in it:
                    st = entry.stat(follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        out.append(FileStatus(entry.path, 0, True, None, st.st_mtime))
                    else:
                        out.append(FileStatus(entry.path, st.st_size, False, file_etag(st),
                                              st.st_mtime))
        except OSError as e:
            raise translate(e, p) from None
        return out

    def list_names(self, path: str) -> list[str]:
        p = local_path(path)
        try:
            return os.listdir(p)
        except OSError as e:
            raise translate(e, p) from None

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        # Same as the generic walk, minus the intermediate lists: task scans are hot.
        pending = [local_path(root)]
        while pending:
            here = pending.pop()
            try:
                with os.scandir(here) as it:
                    for entry in it:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                        else:
                            st = entry.stat(follow_symlinks=False)
                            yield FileStatus(entry.path, st.st_size, False, file_etag(st),
                                             st.st_mtime)
            except OSError as e:
                raise translate(e, here) from None

    def mkdirs(self, path: str) -> None:
        p = local_path(path)
        parts = self.beneath.parts(p) if self.beneath is not None else None
        if parts is not None:
            assert self.beneath is not None
            os.close(self.beneath.open_dir(parts, create=True))
            return
        try:
            os.makedirs(p, exist_ok=True)
        except FileExistsError:
            raise PathExistsError(f"a file exists where a directory must be: {p}", p) from None
        except NotADirectoryError:
            raise PathExistsError(f"a file exists above directory {p}", p) from None
        except OSError as e:
            raise translate(e, p) from None

    def reads_wait(self, path: str) -> bool:
        """False on a filesystem of this machine's own disks or memory, where a read of a
        manifest is one system call; true on a network filesystem (a cluster's shared
        destination), where reads ahead on threads hide the round trips."""
        return filesystem_type(local_path(path)) not in _LOCAL_FS_TYPES

    def delete_file(self, path: str) -> bool:
        p = local_path(path)
        self._dirs.forget_tree(p)  # a link to a directory, followed when it was cached
        try:
            os.unlink(p)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise translate(e, p) from None
        return True

    def delete_tree(self, path: str) -> bool:
        p = local_path(path)
        self._dirs.forget_tree(p)
        try:
            if not os.path.isdir(p) or os.path.islink(p):
                os.unlink(p)
                return True
        except FileNotFoundError:
            return False
        except OSError as e:
            raise translate(e, p) from None
        errors: list[OSError] = []

        def failed(name: str, exc: BaseException) -> None:
            # A task attempt being aborted removes its own directory while a job's cleanup
            # deletes the tree: what is already gone is not an error, and the rest must still
            # go (stopping there left a job directory behind). Anything else is reported once
            # the walk is over.
            if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
                errors.append(exc)

        _rmtree(p, failed)
        if errors:
            raise translate(errors[0], errors[0].filename or p) from None
        return True

    def remove_dir_if_empty(self, path: str) -> bool:
        p = local_path(path)
        self._dirs.forget_tree(p)
        try:
            os.rmdir(p)
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise translate(e, p) from None
        return True

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        """The whole file, which must be a regular file: anything else in the job tree (a FIFO
        would block the reader forever, a device node may act on being opened) is refused by
        name. Checked before opening, so a device is never opened, and again on the open file,
        opened without blocking, in case the path was swapped in between."""
        p = local_path(path)
        try:
            _require_regular(os.stat(p).st_mode, p)
            fd = os.open(p, _READ_FLAGS)
        except OSError as e:
            raise translate(e, p) from None
        with FileIO(fd, "rb", closefd=True) as f:
            try:
                _require_regular(os.fstat(fd).st_mode, p)
                if limit is None:
                    return f.readall()
                return _read_within(f, limit, p)
            except OSError as e:
                raise translate(e, p) from None

    def open_write(self, path: str) -> BinaryIO:
        p = local_path(path)
        try:
            return self._create(p, "wb")
        except StoreError:
            raise
        except OSError as e:
            raise translate(e, p) from None

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        p = local_path(path)
        try:
            with self._create(p, "xb" if exclusive else "wb") as f:
                f.write(data)
        except StoreError:
            raise
        except FileExistsError:
            raise PathExistsError(f"file exists: {p}", p) from None
        except OSError as e:
            raise translate(e, p) from None

    def _create(self, p: str, mode: Literal["wb", "xb"]) -> BinaryIO:
        """``open(p, mode)`` for writing, parents created as needed; beneath the root, through
        directories opened without following links, and not through a link at ``p`` either."""
        parent, _, name = p.rpartition("/")
        parts = None
        if self.beneath is not None and parent and name:
            parts = self.beneath.parts(parent)
        if parts is None:
            if os.path.dirname(p):
                os.makedirs(os.path.dirname(p), exist_ok=True)
            return open(p, mode)
        assert self.beneath is not None
        root = self.beneath.root
        pfd = self.beneath.open_dir(parts, create=True)

        def opener(file: str, flags: int) -> int:
            try:
                return os.open(file, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=pfd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise UnsafePathError(
                        f"a symbolic link beneath the destination {root} is "
                        f"refused (set {FOLLOW_KEY}=true to follow links): {p}", p) from None
                raise

        try:
            return open(name, mode, opener=opener)
        finally:
            os.close(pfd)


def _rmtree(path: str, on_error: Callable[[str, BaseException], None]) -> None:
    """``shutil.rmtree`` that reports each failure to ``on_error`` and goes on."""
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=lambda _func, name, exc: on_error(name, exc))
    else:
        shutil.rmtree(path, onerror=lambda _func, name, info: on_error(name, info[1]))
