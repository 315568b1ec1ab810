"""Local disk, the fast path of the engine: :class:`LocalStore` and its renames.

File renames use Linux ``renameat2(RENAME_NOREPLACE)``: atomic and never replacing an existing
file, at the cost of a plain ``os.rename``. Where that call is missing,
``link`` + ``unlink`` gives the same no-replace guarantee.

Here too what works on many files at once, relative to directories opened once: a chunk's
renames, runs of ``rmdir``, the sources' identities, the checks of a directory moved whole.
Each such loop is in C with the GIL released where the ``_native`` module was built
(``_native.c``), else in Python (ctypes or ``os``), alike. Everything else is ``files.py``'s.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat as statmod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from committer.errors import PathExistsError, PathNotFoundError, StoreError
from committer.store.base import SourceEntry
from committer.store.local.files import LocalFiles, _open_directory
from committer.store.local.identity import file_etag
from committer.store.local.os_errors import translate
from committer.store.local.relative import _open_common_dir, _relative
from manifest_schema.uris import local_path

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


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

try:  # the C loops (setup.py builds them where a compiler is present)
    from committer.store.local import _native
except ImportError:
    _native = None  # type: ignore[assignment]


def _rename_loop(sfd: int, srcs: list[bytes], dfds: list[int],
                 names: list[bytes]) -> tuple[int, int]:
    """The ctypes loop, where the ``_native`` module was not built: ``renameat2(NOREPLACE)``
    of each source (relative to ``sfd``) to its name in its destination directory ``dfds[i]``,
    in order, until one fails: ``(how many succeeded, errno of the failure or 0)``; errno -1
    when a directory fd is negative (the caller could not open that directory)."""
    fn, noreplace = _renameat2, _RENAME_NOREPLACE
    assert fn is not None
    for i, (s, dfd, d) in enumerate(zip(srcs, dfds, names, strict=True)):
        if dfd < 0:
            return i, -1
        if fn(sfd, s, dfd, d, noreplace) != 0:
            return i, ctypes.get_errno()
    return len(srcs), 0


def _count_entries(fd: int) -> int:
    """How many children the open directory ``fd`` has."""
    if _native is not None:
        return _native.count_entries(fd)
    own = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)  # fd: O_PATH
    try:
        return len(os.listdir(own))
    finally:
        os.close(own)


def _regular_files(fd: int, names: list[str], sizes: list[int | None]) -> int:
    """How many of ``names`` (in the open directory ``fd``, links not followed) are regular
    files of the matching size (``None`` or negative: any)."""
    if _native is not None:
        return _native.regular_files(fd, names, sizes)
    found = 0
    for name, size in zip(names, sizes, strict=True):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        found += statmod.S_ISREG(st.st_mode) and (size is None or size < 0
                                                   or st.st_size == size)
    return found


def _affixes(side_file: Callable[[str], str]) -> tuple[str, str] | None:
    """``(prefix, suffix)`` when ``side_file(name)`` is ``prefix + name + suffix`` (as Hadoop's
    checksum files are: ``.name.crc``), judged on a few names; else ``None`` (then the caller
    builds each side file's name)."""
    probes = ("a", "b.c", "\u00e9 x")
    pairs = []
    for probe in probes:
        side = side_file(probe)
        if side.count(probe) != 1:
            return None
        pre, _, suf = side.partition(probe)
        pairs.append((pre, suf))
    return pairs[0] if all(p == pairs[0] for p in pairs) else None


def _identify_each(fd: int, entries: list[SourceEntry], prefix: str
                   ) -> tuple[list[SourceEntry], list[tuple[int, int | None]]]:
    """``LocalStore.identify_sources`` where the ``_native`` module was not built (or a path
    holds a NUL): ``os.stat`` per source relative to ``fd``."""
    cut = len(prefix)
    out: list[SourceEntry] = []
    mismatches: list[tuple[int, int | None]] = []
    for i, entry in enumerate(entries):
        src, dst, size, ident = entry
        if ident is not None:
            out.append(entry)
            continue
        try:
            if not src.startswith(prefix):
                raise ValueError(f"not below {prefix}")
            st = os.stat(src[cut:], dir_fd=fd, follow_symlinks=False)
        except (OSError, ValueError):
            st = None
        if st is None or not statmod.S_ISREG(st.st_mode) or st.st_size != size:
            mismatches.append((i, st.st_size if st is not None and statmod.S_ISREG(st.st_mode)
                               else None))
            out.append(entry)
        else:
            out.append((src, dst, size, file_etag(st)))
    return out, mismatches


def _rmdir_each(fd: int | None, paths: list[str] | list[bytes]) -> int:
    removed = 0
    for path in paths:
        try:
            os.rmdir(path, dir_fd=fd)
        except (OSError, ValueError):
            continue
        removed += 1
    return removed


class LocalStore(LocalFiles):
    """Local disk. With ``root`` (the destination the store was opened for), renames and
    directory creation below it never go through a symbolic link below it: one there is an
    ``UnsafePathError`` naming it, unless ``follow_symlinks``. Paths elsewhere (a custom
    partition location, a report directory) are used as given."""

    name = "local"
    supports_etags = True
    rename_keeps_etag = True
    prunes_empty_dirs = True
    renames_directories = True
    identifies_by_stat = True

    def _parent_error(self, error: StoreError, s: str, d: str) -> StoreError:
        """The failure of a rename whose destination directory could not be opened."""
        if isinstance(error, PathNotFoundError):
            return self._rename_error(OSError(errno.ENOENT, os.strerror(errno.ENOENT)), s, d)
        if isinstance(error, PathExistsError):  # not "the destination exists": no displacing
            return StoreError(f"rename destination parent is not a directory: {error.path}", d)
        return error

    def count_children(self, path: str) -> int:
        p = local_path(path)
        fd = _open_directory(self.beneath, p)
        try:
            return _count_entries(fd)
        except OSError as e:
            raise translate(e, p) from None
        finally:
            os.close(fd)

    def directory_holds(self, path: str, files: Mapping[str, int | None],
                        side_file: Callable[[str], str] | None = None) -> int | None:
        # By name relative to the directory, opened beneath the root without links, and one
        # stat per file in C without the GIL where it was built: a listing of FileStatus
        # objects costs more than the per-file renames the directory fast path saves.
        try:
            fd = _open_directory(self.beneath, local_path(path))
        except StoreError:
            return None
        try:
            count = _count_entries(fd)
            names, sizes = list(files), list(files.values())
            if count < len(names) or _regular_files(fd, names, sizes) != len(names):
                return None
            if count == len(names):
                return count
            if side_file is None:
                return None
            sides = [s for s in map(side_file, names) if s not in files]
            return count if count == len(names) + _regular_files(
                fd, sides, [None] * len(sides)) else None
        except (OSError, ValueError, OverflowError):  # OverflowError: a size no file can have
            return None
        finally:
            os.close(fd)

    def identify_sources(self, root: str, entries: Sequence[SourceEntry]
                         ) -> tuple[list[SourceEntry], list[tuple[int, int | None]]]:
        # One fstatat per source relative to ``root``, opened once beneath the destination, in
        # C with the GIL released for the whole list where it was built: a walk of the task
        # directories (a FileStatus per file, in Python) cost ~100 us per file.
        batch = entries if isinstance(entries, list) else list(entries)
        prefix = local_path(root).rstrip("/") + "/"
        try:
            fd = _open_directory(self.beneath, prefix[:-1] or "/")
        except PathNotFoundError:
            return batch, [(i, None) for i, e in enumerate(batch) if e[3] is None]
        try:
            if _native is not None:
                try:
                    return _native.identify(fd, batch, prefix)
                except ValueError:  # a NUL in a path, or a source not below root
                    pass
            return _identify_each(fd, batch, prefix)
        finally:
            os.close(fd)

    def directory_holds_names(self, path: str, names: Sequence[str],
                              side_file: Callable[[str], str] | None = None) -> int | None:
        # One read of the directory in C (the kind of each child from its directory entry), the
        # names looked up there: no stat per file, and no side file's name built per file.
        pattern = _affixes(side_file) if side_file is not None else (None, None)
        if _native is None or pattern is None:
            return super().directory_holds_names(path, names, side_file)
        try:
            fd = _open_directory(self.beneath, local_path(path))
        except StoreError:
            return None
        try:
            count = _native.holds_names(fd, names if isinstance(names, list) else list(names),
                                        *pattern)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        return None if count < 0 else count

    def rename_file(self, src: str, dst: str) -> None:
        s, d = local_path(src), local_path(dst)
        if "\0" in s or "\0" in d:  # a C string would end there: another file would move
            raise StoreError(f"rename {s!r} -> {d!r}: path contains a NUL character", s)
        self._dirs.forget_tree(s)  # it may be a directory: cached fds below it would follow it
        parent, _, name = d.rpartition("/")
        if not d.startswith("/") or not name:
            self._rename_at(s, _AT_FDCWD, d, d)
            return
        fds, pins, errors = self._dirs.acquire((parent or "/",))
        try:
            if errors:
                raise self._parent_error(errors[parent or "/"], s, d)
            self._rename_at(s, fds[parent or "/"], name, d)
        finally:
            self._dirs.release(pins)

    def _rename_at(self, s: str, dfd: int, name: str, d: str) -> None:
        """Rename ``s`` to ``name`` in directory ``dfd``, never replacing (``d`` names it)."""
        if _renameat2 is not None:
            if _renameat2(_AT_FDCWD, os.fsencode(s), dfd, os.fsencode(name),
                          _RENAME_NOREPLACE) == 0:
                return
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOSYS):  # else: filesystem lacks the flag
                raise self._rename_error(OSError(err, os.strerror(err)), s, d)
        at = None if dfd == _AT_FDCWD else dfd
        try:
            os.link(s, name, dst_dir_fd=at)
        except OSError as e:
            raise self._rename_error(e, s, d) from None
        os.unlink(s)

    def rename_dir(self, src: str, dst: str) -> None:
        """``renameat2(RENAME_NOREPLACE)`` of a directory into ``dst``'s parent, opened beneath
        the root like every rename's: an existing ``dst``, even an empty directory (which plain
        ``rename`` would silently replace) or a link, is ``PathExistsError``."""
        s, d = local_path(src), local_path(dst)
        if "\0" in s or "\0" in d:
            raise StoreError(f"rename {s!r} -> {d!r}: path contains a NUL character", s)
        if _renameat2 is None:
            raise StoreError(f"renameat2 is not available to move directory {s}", s)
        if not os.path.isdir(s) or os.path.islink(s):
            if not os.path.lexists(s):
                raise PathNotFoundError(f"rename source not found: {s}", s)
            raise StoreError(f"not a directory: {s}", s)
        self._dirs.forget_tree(s)  # cached fds below it would follow it
        parent, _, name = d.rpartition("/")
        if not d.startswith("/") or not name:
            raise StoreError(f"not an absolute local path: {d}", d)
        fds, pins, errors = self._dirs.acquire((parent or "/",))
        try:
            if errors:
                raise self._parent_error(errors[parent or "/"], s, d)
            if _renameat2(_AT_FDCWD, os.fsencode(s), fds[parent or "/"], os.fsencode(name),
                          _RENAME_NOREPLACE) == 0:
                return
        finally:
            self._dirs.release(pins)
        err = ctypes.get_errno()
        if err in (errno.ENOTEMPTY, errno.EEXIST):
            raise PathExistsError(f"rename destination exists: {d}", d)
        raise self._rename_error(OSError(err, os.strerror(err)), s, d)

    def rename_batch(self, entries: Sequence[tuple[str, str, Any, Any]],
                     start: int = 0) -> tuple[int, list[tuple[int, StoreError]]]:
        """The job commit's rename loop: one ``renameat2`` per entry and nothing else. The work
        is one system call per file, so per-file costs show directly as lost throughput:
        sources relative to the batch's common directory, opened once, and each destination
        relative to its own directory, kept open for the whole commit (``DirectoryCache``:
        opened beneath the root without following links, so the renames cannot leave it);
        the kernel walks one or two components per path instead of a dozen. The loop itself
        is in C with the GIL released once per run of entries where the ``_native`` module was
        built (else a ctypes call per entry, each taking and dropping the GIL). The first
        failure stops the loop and is handed back, translated."""
        reached, error = self._rename_run(entries, start)
        return (len(entries), []) if error is None else (reached + 1, [(reached, error)])

    def _rename_run(self, entries: Sequence[tuple[str, str, Any, Any]],
                    start: int) -> tuple[int, StoreError | None]:
        """The loop of :meth:`rename_batch`: the index reached and the error that stopped it."""
        if _renameat2 is None or type(self).rename_file is not LocalStore.rename_file:
            return self._rename_each(entries, start)  # a subclass's own rename_file counts
        todo = entries[start:]
        if not todo:
            return len(entries), None
        srcs, dsts = [e[0] for e in todo], [e[1] for e in todo]
        if min(dsts)[:1] != "/" or max(dsts)[:1] != "/":  # URIs: rename_file converts them
            return self._rename_each(entries, start)
        src_root = _open_common_dir(srcs)
        if src_root is None:
            return self._rename_each(entries, start)
        sfd, cut_s = src_root
        parents = [d[: d.rfind("/")] or "/" for d in dsts]
        n, i, err, reached = len(todo), 0, 0, len(entries)
        errors: dict[str, StoreError] = {}
        try:
            while i < n:
                j = self._run_end(parents, i)
                fds, pins, errors = self._dirs.acquire(dict.fromkeys(parents[i:j]))
                try:
                    dfds = [fds.get(p, -1) for p in parents[i:j]]
                    if _native is not None:
                        batch = entries if isinstance(entries, list) else list(entries)
                        reached, err = _native.rename_into(batch, start + i, start + j, sfd,
                                                           cut_s, dfds, _RENAME_NOREPLACE)
                    else:
                        if "\0" in "".join(srcs[i:j]) or "\0" in "".join(dsts[i:j]):
                            raise ValueError("embedded NUL in a path")
                        names = [d[d.rfind("/") + 1:] for d in dsts[i:j]]
                        done, err = _rename_loop(sfd, _relative(srcs[i:j], cut_s), dfds,
                                                 _relative(names, 0))
                        reached = start + i + done
                finally:
                    self._dirs.release(pins)
                if err != 0:
                    break
                i = j
        except ValueError:  # a NUL in a path of this run (nothing of it renamed): one by one
            return self._rename_each(entries, start + i)
        finally:
            os.close(sfd)
        if err == 0:
            return len(entries), None
        s, d = entries[reached][0], entries[reached][1]
        if err == -1:  # its directory could not be opened
            return reached, self._parent_error(errors[parents[reached - start]], s, d)
        if err in (errno.EINVAL, errno.ENOSYS):  # the filesystem lacks the flag
            return self._rename_each(entries, reached)
        return reached, self._rename_error(OSError(err, os.strerror(err)), s, d)

    def _rename_each(self, entries: Sequence[tuple[str, str, Any, Any]],
                     start: int) -> tuple[int, StoreError | None]:
        reached, failures = super().rename_batch(entries, start)
        return (reached - 1, failures[0][1]) if failures else (reached, None)

    def _run_end(self, parents: list[str], i: int) -> int:
        """Where the run of entries starting at ``i`` ends: at most ``_pins_per_run``
        distinct destination directories, so the fds one thread holds stay bounded."""
        limit = self._pins_per_run
        if len(set(parents[i:])) <= limit:
            return len(parents)
        seen: set[str] = set()
        for j in range(i, len(parents)):
            if parents[j] not in seen:
                if len(seen) == limit:
                    return j
                seen.add(parents[j])
        return len(parents)

    def rmdir_run(self, paths: Sequence[str]) -> int:
        """``rmdir`` each path in order (children first), skipping any that is missing, not
        empty or not removable; returns how many were removed. Relative to the paths' common
        directory, opened once, like :meth:`rename_batch`, and in C where that was built."""
        if not paths:
            return 0
        self._dirs.forget(paths)  # only empty directories go: none has one below it
        root = _open_common_dir(paths)
        if root is None:
            return _rmdir_each(None, list(paths))
        fd, cut = root
        try:
            if _native is not None:  # it copies the list itself
                batch = paths if isinstance(paths, list) else list(paths)
                return _native.rmdir_paths(fd, batch, cut)
            if "\0" in "".join(paths):
                raise ValueError("embedded NUL in a path")
            return _rmdir_each(fd, _relative(paths, cut))
        except ValueError:  # a NUL in a path: os.rmdir refuses that one alone
            return _rmdir_each(None, list(paths))
        finally:
            os.close(fd)

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
        self._dirs.forget_tree(s)
        self._dirs.forget_tree(d)
        parent, _, name = d.rpartition("/")
        if not d.startswith("/") or not name:
            try:
                os.replace(s, d)
            except OSError as e:
                raise self._rename_error(e, s, d) from None
            return
        fds, pins, errors = self._dirs.acquire((parent or "/",))
        try:
            if errors:
                raise self._parent_error(errors[parent or "/"], s, d)
            os.replace(s, name, dst_dir_fd=fds[parent or "/"])
        except OSError as e:
            raise self._rename_error(e, s, d) from None
        except ValueError as e:
            raise StoreError(f"rename {s!r} -> {d!r}: {e}", s) from None
        finally:
            self._dirs.release(pins)
