"""Local disk: direct ``os`` calls, the fast path of the engine.

File renames use Linux ``renameat2(RENAME_NOREPLACE)``: atomic and never replacing an existing
file, at the cost of a plain ``os.rename`` (measured equal here). Where that call is missing,
``link`` + ``unlink`` gives the same no-replace guarantee.

Local files have no etag, so one is made from what a rename keeps: inode, modification time and
size. It proves that a destination *is* the renamed source (HADOOP-18012 recovery) and lets
output validation notice a replaced file.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat as statmod
from collections.abc import Iterator
from typing import BinaryIO

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store.base import FileStatus, Store

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_TRANSIENT_ERRNOS = frozenset({errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT, errno.EBUSY})


def _load_renameat2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()


def local_path(location: str) -> str:
    """``file:///x`` or ``file:/x`` -> ``/x``; plain paths unchanged."""
    if location.startswith("file:"):
        rest = location[5:]
        if rest.startswith("//"):  # file:///x or file://localhost/x
            rest = rest[2:]
            if rest.startswith("localhost/"):
                rest = rest[len("localhost") :]
        return rest
    return location


def file_etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def translate(e: OSError, path: str) -> StoreError:
    """Map an ``OSError`` to the engine's families, naming the path."""
    msg = f"{e.strerror or e}: {path}"
    if e.errno == errno.ENOENT:
        return PathNotFoundError(msg, path)
    if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
        return PathExistsError(msg, path)
    if e.errno in _TRANSIENT_ERRNOS:
        return TransientStoreError(msg, path)
    return StoreError(msg, path)


class LocalStore(Store):
    name = "local"
    supports_etags = True
    rename_keeps_etag = True

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
        try:
            os.makedirs(p, exist_ok=True)
        except FileExistsError:
            raise PathExistsError(f"a file exists where a directory must be: {p}", p) from None
        except NotADirectoryError:
            raise PathExistsError(f"a file exists above directory {p}", p) from None
        except OSError as e:
            raise translate(e, p) from None

    def rename_file(self, src: str, dst: str) -> None:
        s, d = local_path(src), local_path(dst)
        if _renameat2 is not None:
            if _renameat2(_AT_FDCWD, os.fsencode(s), _AT_FDCWD, os.fsencode(d),
                          _RENAME_NOREPLACE) == 0:
                return
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOSYS):  # else: filesystem lacks the flag
                raise self._rename_error(OSError(err, os.strerror(err)), s, d)
        try:
            os.link(s, d)
        except OSError as e:
            raise self._rename_error(e, s, d) from None
        os.unlink(s)

    def _rename_error(self, e: OSError, s: str, d: str) -> StoreError:
        if e.errno == errno.EEXIST:
            return PathExistsError(f"rename destination exists: {d}", d)
        if e.errno == errno.ENOENT:
            if not os.path.lexists(s):
                return PathNotFoundError(f"rename source not found: {s}", s)
            return PathNotFoundError(f"rename destination parent not found: {d}", d)
        return translate(e, f"{s} -> {d}")

    def replace_file(self, src: str, dst: str) -> None:
        s, d = local_path(src), local_path(dst)
        try:
            os.replace(s, d)
        except OSError as e:
            raise self._rename_error(e, s, d) from None

    def delete_file(self, path: str) -> bool:
        p = local_path(path)
        try:
            os.unlink(p)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise translate(e, p) from None
        return True

    def delete_tree(self, path: str) -> bool:
        p = local_path(path)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise translate(e, p) from None
        return True

    def remove_dir_if_empty(self, path: str) -> bool:
        p = local_path(path)
        try:
            os.rmdir(p)
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise translate(e, p) from None
        return True

    def rmdir_if_empty(self, path: str) -> bool:
        """Remove ``path`` if it is an empty directory; ``False`` (never an error) if it is
        missing, not empty, not a directory, or cannot be removed. One ``rmdir`` call: the job
        commit prunes emptied task trees with it while the renames run."""
        try:
            os.rmdir(local_path(path))
        except OSError:
            return False
        return True

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        p = local_path(path)
        try:
            with open(p, "rb") as f:
                if limit is None:
                    return f.read()
                data = f.read(limit + 1)
        except IsADirectoryError:
            raise StoreError(f"is a directory, not a file: {p}", p) from None
        except OSError as e:
            raise translate(e, p) from None
        if len(data) > limit:
            raise StoreError(f"file is larger than the limit of {limit} bytes: {p}", p)
        return data

    def open_write(self, path: str) -> BinaryIO:
        p = local_path(path)
        try:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            return open(p, "wb")
        except OSError as e:
            raise translate(e, p) from None

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        p = local_path(path)
        parent = os.path.dirname(p)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(p, "xb" if exclusive else "wb") as f:
                f.write(data)
        except FileExistsError:
            raise PathExistsError(f"file exists: {p}", p) from None
        except OSError as e:
            raise translate(e, p) from None
