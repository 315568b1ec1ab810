"""Directories of a local destination, opened without following symbolic links beneath it.

A symbolic link inside the destination (``dest/part=00000 -> /elsewhere``) would let renames
and directory creation write outside the destination. :class:`Beneath` opens a directory
below its root component by component from the root, refusing a link anywhere on the way, so
that what is then done relative to the open directory stays beneath the root. The root itself
is opened as given: the user chose it, link or not.

On Linux 5.6+ one ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` does the whole walk in
the kernel; where that call is missing (or refused by a seccomp filter) a walk of
``openat(O_NOFOLLOW)`` calls gives the same result, and it also runs to explain a refusal.

:class:`DirectoryCache` keeps directories open for the rename loop, so that the cost is one
open per directory per commit rather than one per file.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import os
import stat as statmod
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from committer.errors import PathExistsError, PathNotFoundError, StoreError, UnsafePathError
from committer.store.local.os_errors import translate

FOLLOW_KEY = "mapreduce.manifest.committer.destination.follow.symlinks"

DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def _load_syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


_syscall = _load_syscall()


class _Kernel:
    # cleared the first time the kernel says it has no openat2 (ENOSYS) or a filter refuses it
    openat2 = _syscall is not None


def _openat2(dir_fd: int, relative: bytes) -> int:
    """The fd of directory ``relative`` below ``dir_fd``, resolved in the kernel without
    symbolic links and without leaving ``dir_fd``; ``-errno`` on failure."""
    how = _OpenHow(DIR_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    assert _syscall is not None
    fd = int(_syscall(_SYS_OPENAT2, dir_fd, relative, ctypes.byref(how),
                      ctypes.sizeof(how)))
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM):
        _Kernel.openat2 = False
    return -err


def use_openat2(wanted: bool) -> bool:
    """Use ``openat2`` where the kernel has it (``True``), or the component walk only (tests
    hold the two to the same results); returns whether ``openat2`` is now used."""
    _Kernel.openat2 = wanted and _syscall is not None
    return _Kernel.openat2


class Beneath:
    """Opens directories at or below ``root`` with no symbolic link below ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"
        self._prefix = self.root if self.root == "/" else self.root + "/"

    def parts(self, path: str) -> list[str] | None:
        """``path``'s components below the root (``[]`` for the root itself), ``None`` when
        it is not below the root. ``..`` that would leave the root is refused."""
        if path == self.root or path.rstrip("/") == self.root:
            return []
        if not path.startswith(self._prefix):
            return None
        out: list[str] = []
        for part in path[len(self._prefix):].split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not out:
                    raise UnsafePathError(
                        f"path leads out of the destination {self.root} through '..': {path}",
                        path)
                out.pop()
            else:
                out.append(part)
        return out

    def open_dir(self, parts: list[str], *, create: bool = False) -> int:
        """A new ``O_PATH`` fd of the directory ``root/parts``; with ``create``, missing
        directories are made. ``UnsafePathError`` for a symbolic link on the way,
        ``PathNotFoundError`` for a missing directory, ``PathExistsError`` for a file."""
        try:
            if create:  # the root and what holds it are the user's: made as given
                os.makedirs(self.root, exist_ok=True)
            root_fd = os.open(self.root, DIR_FLAGS)
        except FileExistsError:
            raise PathExistsError(f"a file exists where a directory must be: {self.root}",
                                  self.root) from None
        except NotADirectoryError:
            raise PathExistsError(f"a file exists above directory {self.root}",
                                  self.root) from None
        except OSError as e:
            raise translate(e, self.root) from None
        if not parts:
            return root_fd
        try:
            if _Kernel.openat2:
                try:
                    relative = os.fsencode("/".join(parts))
                except UnicodeError as e:
                    raise StoreError(f"{e}: {self.root}/{'/'.join(parts)}") from None
                if b"\0" not in relative:
                    fd = _openat2(root_fd, relative)
                    if fd >= 0:
                        return fd
            # missing openat2, or it failed: the walk creates, or says exactly what is wrong
            return self._walk(root_fd, parts, create)
        finally:
            os.close(root_fd)

    def _walk(self, root_fd: int, parts: list[str], create: bool) -> int:
        fd = os.dup(root_fd)
        try:
            for i, part in enumerate(parts):
                here = self._prefix + "/".join(parts[: i + 1])
                try:
                    nxt = self._open_part(fd, part, here, create, last=i == len(parts) - 1)
                except ValueError as e:  # a NUL in the name
                    raise StoreError(f"{e}: {here!r}", here) from None
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_part(self, fd: int, part: str, here: str, create: bool, last: bool) -> int:
        for _ in range(2):  # a directory made by someone else between our two calls is fine
            try:
                return os.open(part, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise PathNotFoundError(f"directory not found: {here}", here) from None
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as e:
                    raise translate(e, here) from None
            except OSError as e:
                if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise translate(e, here) from None
                try:
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                except OSError as e2:
                    raise translate(e2, here) from None
                if statmod.S_ISLNK(st.st_mode):
                    raise UnsafePathError(
                        f"a symbolic link beneath the destination {self.root} is refused (set "
                        f"{FOLLOW_KEY}=true to follow links): {here}", here) from None
                if last:
                    raise PathExistsError(f"a file exists where a directory must be: {here}",
                                          here) from None
                raise PathExistsError(f"a file exists above directory {here}", here) from None
        raise PathNotFoundError(f"directory not found: {here}", here)


class _Entry:
    __slots__ = ("dead", "fd", "pins")

    def __init__(self, fd: int) -> None:
        self.fd, self.pins, self.dead = fd, 0, False


class DirectoryCache:
    """Open directory fds by path, shared by the threads of one commit, least recently used
    dropped beyond ``capacity``. A thread pins what it uses (:meth:`acquire`) and unpins it
    (:meth:`release`); an fd dropped while pinned is closed at its last release, so no thread
    ever uses a closed (or reused) fd number. :meth:`forget_tree`, :meth:`forget` and
    :meth:`clear` drop entries whose directory may have moved or gone (a cached fd would
    follow the old directory). Only this process's own moves are seen: a directory another
    process moves away keeps receiving the renames meant for its path until dropped here."""

    def __init__(self, opener: Callable[[str], int], capacity: int) -> None:
        self._open = opener
        self.capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._sorted: list[str] = []  # the same paths in order: a tree's are one run of it

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, paths: Iterable[str]
                ) -> tuple[dict[str, int], list[_Entry], dict[str, StoreError]]:
        """``(fd by path, pins to release, error by path)`` for the directories ``paths``."""
        fds: dict[str, int] = {}
        pins: list[_Entry] = []
        missing: list[str] = []
        with self._lock:
            entries = self._entries
            for path in paths:
                entry = entries.get(path)
                if entry is None:
                    missing.append(path)
                    continue
                entries.move_to_end(path)
                entry.pins += 1
                pins.append(entry)
                fds[path] = entry.fd
        errors: dict[str, StoreError] = {}
        for path in missing:  # opened outside the lock: other threads go on meanwhile
            try:
                fd = self._open(path)
            except StoreError as e:
                errors[path] = e
                continue
            with self._lock:
                entry = self._entries.get(path)
                if entry is None:
                    entry = self._entries[path] = _Entry(fd)
                    bisect.insort(self._sorted, path)
                    self._trim()
                else:  # another thread opened it first
                    os.close(fd)
                entry.pins += 1
            pins.append(entry)
            fds[path] = entry.fd
        return fds, pins, errors

    def release(self, pins: Iterable[_Entry]) -> None:
        with self._lock:
            for entry in pins:
                entry.pins -= 1
                if entry.dead and entry.pins == 0:
                    os.close(entry.fd)

    def forget_tree(self, path: str) -> None:
        """Drop ``path`` and every directory below it: it was moved or removed."""
        if not self._entries:
            return
        path = path.rstrip("/") or "/"
        below = path if path == "/" else path + "/"
        with self._lock:
            keys = self._sorted
            lo = bisect.bisect_left(keys, below)
            hi = bisect.bisect_left(keys, below[:-1] + chr(ord("/") + 1))  # the run of below*
            doomed = keys[lo:hi]
            if path in self._entries:
                doomed.append(path)
            for key in doomed:
                self._remove(key)

    def forget(self, paths: Iterable[str]) -> None:
        """Drop exactly these directories (removed while empty: none had one below it)."""
        if not self._entries:
            return
        with self._lock:
            entries = self._entries
            for path in paths:
                if path in entries:
                    self._remove(path)

    def clear(self) -> None:
        if not self._entries:
            return
        with self._lock:
            for entry in self._entries.values():
                self._drop(entry)
            self._entries.clear()
            self._sorted.clear()

    def _trim(self) -> None:
        while len(self._entries) > self.capacity:
            self._remove(next(iter(self._entries)))

    def _remove(self, key: str) -> None:
        self._drop(self._entries.pop(key))
        del self._sorted[bisect.bisect_left(self._sorted, key)]

    @staticmethod
    def _drop(entry: _Entry) -> None:
        if entry.pins == 0:
            os.close(entry.fd)
        else:
            entry.dead = True
