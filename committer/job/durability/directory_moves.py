"""Rollback of the directory fast path: a directory the commit moved whole goes back whole.

The journal records, before anything moves, every directory the commit may move with one
rename (``Journal.directory_moves``). Rolling back, such a directory whose source is gone and
whose destination holds exactly the task's files for it (and their checksum side files, which
moved with them), each provably the renamed file (its recorded identity and size, as the
per-file rollback requires), is renamed back in one call.
Anything else (the source still there, a file missing or unproven, something extra) is left to
the per-file rollback, which moves back whatever it can prove and names the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

from committer.errors import StoreError
from committer.job.stages.context import StageContext
from committer.job.stages.plan import Chunk, RenameEntry
from committer.layout import basename, checksum_side_file
from committer.store.managed import ManagedStore
from manifest_schema.journal import DirectoryMove


def _entries_by_directory(chunks: Iterable[Chunk], moves: Iterable[DirectoryMove]
                          ) -> dict[str, list[RenameEntry]]:
    wanted = {m.dest: m.task_id for m in moves}
    tasks = set(wanted.values())
    out: dict[str, list[RenameEntry]] = {d: [] for d in wanted}
    for chunk in chunks:
        if chunk.task_id not in tasks:
            continue
        for e in chunk.entries:
            d = e[1].rpartition("/")[0]
            if wanted.get(d) == chunk.task_id:
                out[d].append(e)
    return out


def _provably_ours(store: ManagedStore, move: DirectoryMove,
                   entries: list[RenameEntry]) -> bool:
    if not entries:
        return False
    try:
        listing = {basename(f.path): f for f in store.list_dir(move.dest)}
    except StoreError:
        return False
    sides = {checksum_side_file(basename(e[1])) for e in entries}
    if any(name in sides and not f.is_dir for name, f in listing.items()):
        listing = {name: f for name, f in listing.items() if name not in sides}  # move with them
    if len(listing) != len(entries):
        return False
    for src, dst, size, etag in entries:
        found = listing.get(basename(dst))
        if found is None or basename(src) != basename(dst) \
                or not store.proves_rename(found, size, etag):
            return False
    return True


def move_directories_back(ctx: StageContext, moves: Iterable[DirectoryMove],
                          chunks: Iterable[Chunk]) -> int:
    """Rename back each moved directory that provably holds exactly this job's files for it;
    returns how many files went back that way."""
    store = ctx.store
    candidates = [m for m in moves if not store.exists(m.source) and store.exists(m.dest)]
    if not candidates:
        return 0
    entries = _entries_by_directory(chunks, candidates)
    restored = 0
    for move in candidates:
        mine = entries[move.dest]
        if not _provably_ours(store, move, mine):
            continue
        try:
            store.mkdirs(move.source.rpartition("/")[0])
            store.rename_dir(move.dest, move.source)
        except StoreError:
            continue  # the per-file rollback that follows does what it can, and says so
        restored += len(mine)
    return restored
