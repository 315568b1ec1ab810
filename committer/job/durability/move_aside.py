"""Overwrite without losing anything until the commit is complete: move data aside, not delete it.

Whatever an overwrite replaces (partition directories in dynamic partition overwrite, the paths
Spark's ``deleteWithJob`` names in static overwrite, an existing file under the last-writer-wins
conflict policy) is renamed into the job attempt directory instead of being deleted:

    <attempt dir>/replaced/d/<path relative to dest>    data that lived under the destination
    <attempt dir>/displaced/d/<path relative to dest>   files displaced by last-writer-wins
    <attempt dir>/replaced/x/<hash of path>             data that lived elsewhere (custom
                                                        partition locations); one record each
                                                        in <attempt dir>/moved/<hash>.json

The aside trees mirror the destination, empty directories included, so they *are* the record of
what was moved: rollback walks them and renames everything back; after ``_SUCCESS`` they are
deleted with the job directory. Every move is a file rename, so it is idempotent: a move that is
repeated after a crash finds the file already aside (or moves what was left).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import orjson

from committer.errors import ConfigError, PathExistsError, PathNotFoundError
from committer.layout import (
    DISPLACED_DIR,
    REPLACED_DIR,
    JobLayout,
    basename,
    is_committer_dir,
    parent,
)
from committer.parallel import run_parallel
from committer.store.base import FileStatus
from committer.store.managed import ManagedStore
from manifest_schema.records import MovedAside

RECORD_LIMIT = 1024 * 1024


@dataclass
class _Tree:
    files: list[FileStatus] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)


def _walk(store: ManagedStore, root: str, layout: JobLayout | None) -> _Tree:
    """Files and directories below ``root``; with a layout, the committer's own are skipped."""
    out = _Tree()
    pending = [root]
    while pending:
        here = pending.pop()
        try:
            children = store.list_dir(here)
        except PathNotFoundError:
            continue
        for st in children:
            path = st.path.rstrip("/")
            if layout is not None and is_committer_dir(layout.dest, path):
                continue
            if st.is_dir:
                out.dirs.append(path)
                pending.append(path)
            else:
                out.files.append(st)
    return out


def move_file(store: ManagedStore, src: str, dst: str, status: FileStatus) -> None:
    """Rename one file that must not be lost; repeating it after a crash is safe.

    The source's identity goes with the rename, so a retried rename whose source is gone is
    accepted only if the destination provably is the file. A destination that exists while the
    source is still there is the trace of a copy-then-delete rename that died in between: the
    source is deleted if the copy provably is it, otherwise the conflict is raised.
    """
    identity = store.identity(status)
    try:
        store.rename_file(src, dst, size=status.size, etag=identity)
        return
    except PathExistsError:
        found = store.stat_or_none(dst)
        if found is None or not store.proves_rename(found, status.size, identity):
            raise
    store.delete_file(src)


def _leaves(paths: Iterable[str]) -> list[str]:
    ordered = sorted(set(paths))
    return [p for i, p in enumerate(ordered)
            if i + 1 == len(ordered) or not ordered[i + 1].startswith(p + "/")]


def _move_tree(store: ManagedStore, tree: _Tree, src_root: str, dst_root: str,
               executor: Executor, window: int) -> None:
    """Mirror ``tree`` (below ``src_root``) under ``dst_root``: directories first, then files."""
    def target(path: str) -> str:
        return dst_root + path[len(src_root):]

    store.mkdirs(dst_root)
    run_parallel(executor, _leaves(target(d) for d in tree.dirs), store.mkdirs, window=window)
    run_parallel(executor, tree.files,
                 lambda st: move_file(store, st.path, target(st.path.rstrip("/")), st),
                 window=window)


def move_aside(store: ManagedStore, layout: JobLayout, path: str, executor: Executor,
               window: int, kind: str = REPLACED_DIR) -> MovedAside | None:
    """Move the file or tree at ``path`` aside; ``None`` if there was nothing there.

    The emptied directories are removed afterwards, as a delete would have done, except the
    destination directory itself (whose committer directories stay where they are).
    """
    path = path.rstrip("/")
    dest = layout.dest
    if dest.startswith(path + "/"):
        raise ConfigError(f"cannot move {path} aside: it contains the destination {dest}")
    status = store.stat_or_none(path)
    if status is None:
        return None
    aside = layout.aside_location(path, kind)
    if not status.is_dir:
        store.mkdirs(parent(aside))
        move_file(store, path, aside, status)
        return MovedAside(path, aside)
    tree = _walk(store, path, layout if path == dest else None)
    _move_tree(store, tree, path, aside, executor, window)
    for d in sorted(tree.dirs, key=lambda p: p.count("/"), reverse=True):
        store.remove_dir_if_empty(d)
    if path != dest:
        store.remove_dir_if_empty(path)
    return MovedAside(path, aside)


def restore(store: ManagedStore, moved: MovedAside, executor: Executor, window: int) -> None:
    """Put what was moved aside back where it was (idempotent); the aside copy is removed."""
    status = store.stat_or_none(moved.aside)
    if status is None:
        return
    if not status.is_dir:
        store.mkdirs(parent(moved.original))
        move_file(store, moved.aside, moved.original, status)
        return
    tree = _walk(store, moved.aside, None)
    _move_tree(store, tree, moved.aside, moved.original, executor, window)
    store.delete_tree(moved.aside)


# -- records of paths moved aside outside the destination, and by deleteWithJob ------------------


def record(store: ManagedStore, layout: JobLayout, moved: MovedAside) -> None:
    """Note a move before making it, so rollback finds it even if the job dies mid-move."""
    store.write_bytes(layout.move_record_path(moved.original), orjson.dumps(moved.to_json()))


def records(store: ManagedStore, layout: JobLayout) -> list[MovedAside]:
    """Every recorded move of this job attempt; a ``FormatError`` naming an unreadable one."""
    out = []
    for st in store.list_dir_or_empty(layout.move_records_dir):
        if st.is_dir or not basename(st.path).endswith(".json"):
            continue
        out.append(MovedAside.loads(store.read_bytes(st.path, limit=RECORD_LIMIT), st.path))
    return sorted(out, key=lambda m: m.original)


def trees_under_dest(layout: JobLayout) -> list[MovedAside]:
    """The mirrored aside trees: restoring them puts back everything moved from under dest."""
    return [MovedAside(layout.dest, layout.aside_root(kind)) for kind in (REPLACED_DIR,
                                                                         DISPLACED_DIR)]


def record_and_move(store: ManagedStore, layout: JobLayout, path: str, executor: Executor,
                    window: int, kind: str = REPLACED_DIR) -> MovedAside | None:
    moved = MovedAside(path.rstrip("/"), layout.aside_location(path, kind))
    record(store, layout, moved)
    return move_aside(store, layout, path, executor, window, kind)


def displace(store: ManagedStore, layout: JobLayout, path: str) -> None:
    """Last writer wins: move the existing file at ``path`` aside so the rename can proceed."""
    status = store.stat_or_none(path)
    if status is None or status.is_dir:
        return  # gone already (a concurrent mover), or a directory: the rename will say
    aside = layout.aside_location(path, DISPLACED_DIR)
    if not path.startswith(layout.dest + "/"):
        record(store, layout, MovedAside(path, aside))
    store.mkdirs(parent(aside))
    move_file(store, path, aside, status)
