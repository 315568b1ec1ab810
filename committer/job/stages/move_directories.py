"""The directory fast path of the rename stage: a task's new partition moved with one rename.

When exactly one task writes files into a destination directory ``D``, ``D`` is a leaf (no
other planned directory lies below it) and ``D`` does not exist at the destination (or was
moved aside by a dynamic overwrite), the task's directory for it is renamed to ``D`` whole,
as FileOutputCommitter's merge does, instead of file by file. Only on stores whose directory
rename is one atomic call that never replaces (``Store.renames_directories``).

Which directories qualify is decided in two steps: :func:`directory_candidates` from the plan
(who writes where), then the commit transaction keeps those absent at the destination and
records them in the journal before anything moves. :func:`move_task_directories` then proves,
just before each move, that the source directory holds exactly the manifest's files for ``D``
(names and sizes; besides them only their checksum side files, which Hadoop's local filesystem
writes beside each file and which move with it, as with FileOutputCommitter); anything else
there, a destination that appeared meanwhile, or a failed rename leaves that directory to the
ordinary per-file renames. After the move the destination's entries are counted once more, and
named when the count differs: a file that arrived between the check and the rename goes back to
the task directory (it is not the task's committed output), and a file that vanished fails the
commit, as its per-file rename would have.

The checks are one stat per file and one count per directory (in C on local disk): a Python
listing of each directory cost more than the per-file renames it saves. Where the commit
already made that stat while planning (the sources of a manifest without identities are
identified by it, ``durability/identities.py``: ``JobPlan.checked_sources``), the check is one
read of the directory's names instead, so each file is still stat'ed once. Between that stat
and the move a file could be swapped for another of the same name and a different size; a
writer able to do that could as well rewrite a file's bytes in place, which no check here or
in the per-file renames sees either.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from operator import itemgetter

from committer import statistics as st
from committer.errors import PathNotFoundError, StoreError
from committer.job.stages.plan import JobPlan, RenameEntry
from committer.layout import JobLayout, basename, checksum_side_file, is_committer_dir, join
from committer.statistics import Tally
from committer.store.managed import ManagedStore
from manifest_schema.journal import DirectoryMove

try:
    from committer.job.stages import _checks
except ImportError:  # built only where a compiler was present (setup.py)
    _checks = None  # type: ignore[assignment]

_SOURCE, _DEST, _SIZE = itemgetter(0), itemgetter(1), itemgetter(2)


def directory_candidates(plan: JobPlan, layout: JobLayout) -> list[DirectoryMove]:
    """The destination directories the plan lets move whole, were they absent: one writer,
    strictly below the destination, not the committer's own, and a leaf of every directory
    the plan creates. The source is the writer's mirror of it in its task attempt directory
    (what task commit's scan produces; :func:`move_task_directories` checks it)."""
    owners = plan.single_writer_directories()
    if not owners:
        return []
    dest = layout.dest
    wanted = sorted({*plan.directories, *plan.partitions})
    attempts = {t.task_id: t.task_attempt_id for t in plan.tasks}
    out = []
    for d, task_id in sorted(owners.items()):
        if not d.startswith(dest + "/") or is_committer_dir(dest, d):
            continue
        below = bisect_right(wanted, d + "/")
        if below < len(wanted) and wanted[below].startswith(d + "/"):
            continue  # something planned below it: not a leaf
        out.append(DirectoryMove(task_id, _mirror(layout, attempts[task_id], d), d))
    return out


def _mirror(layout: JobLayout, task_attempt_id: str, directory: str) -> str:
    """The task attempt's directory whose files go to ``directory`` of the destination."""
    return layout.task_attempt_dir(task_attempt_id) + directory[len(layout.dest):]


def _by_directory(entries: list[RenameEntry], moves: Sequence[DirectoryMove]
                  ) -> dict[str, list[RenameEntry]]:
    """The entries whose destination lies directly in each move's destination."""
    out: dict[str, list[RenameEntry]] = {m.dest: [] for m in moves}
    for e in entries:
        bucket = out.get(e[1].rpartition("/")[0])
        if bucket is not None:
            bucket.append(e)
    return out


def _mirrored(moves: Sequence[DirectoryMove], entries: list[RenameEntry]
              ) -> list[tuple[DirectoryMove, list[RenameEntry], dict[str, int | None] | None]]:
    """Each move with its entries and their ``name -> size`` (``None``: the source is not
    their mirror). A task with one candidate directory usually writes nothing else (the
    ``repartition(col)`` layout): then one check in C covers all of its entries, with no loop
    to group them."""
    if len(moves) == 1:
        expected = _expected(moves[0], entries)
        if expected is not None:
            return [(moves[0], entries, expected)]
    by_dir = _by_directory(entries, moves)
    return [(m, by_dir[m.dest], _expected(m, by_dir[m.dest]) if by_dir[m.dest] else None)
            for m in moves]


def _names_in(paths: list[str], directory: str) -> list[str] | None:
    """The names of ``paths`` when each lies directly in ``directory``, else ``None``."""
    if _checks is not None:
        return _checks.names_in(paths, directory)
    cut = len(directory) + 1
    names = [p[cut:] for p in paths]
    if all(p[: cut - 1] == directory and p[cut - 1: cut] == "/" and n and "/" not in n
           for p, n in zip(paths, names, strict=True)):
        return names
    return None


def _expected(move: DirectoryMove, entries: list[RenameEntry]) -> dict[str, int | None] | None:
    """``name -> size`` of ``entries``, or ``None`` unless each goes directly into
    ``move.dest`` from ``move.source`` under the same name (then the directory is not their
    mirror). Per-file work in C: this runs for every file the fast path moves."""
    names = _names_in(list(map(_DEST, entries)), move.dest)
    if names is None or _names_in(list(map(_SOURCE, entries)), move.source) != names:
        return None
    out = dict(zip(names, map(_SIZE, entries), strict=True))
    return out if len(out) == len(names) else None  # a name twice: not a mirror


def _holds_exactly(store: ManagedStore, directory: str, expected: Mapping[str, int | None],
                   sized: bool) -> int | None:
    """How many children ``directory`` has, when they are exactly the expected files with the
    expected sizes and, beside any of them, its checksum side file (Hadoop's local filesystem
    leaves one per file a Spark task writes; it moves with its file, as FileOutputCommitter
    moves it, and nothing lists it). ``None``: anything else. ``sized``: each expected file
    was found a regular file of its size while the commit was planned (the stat that
    identified it), so one listing of the names proves the rest."""
    try:
        if sized:
            return store.directory_holds_names(directory, list(expected), checksum_side_file)
        return store.directory_holds(directory, expected, checksum_side_file)
    except StoreError:
        return None


def _after_move(store: ManagedStore, move: DirectoryMove, mine: list[RenameEntry],
                children: int) -> None:
    """``move.dest`` must now hold what the source held when it was checked (``children``
    entries: the task's files ``mine`` and their checksum side files): a late arrival goes
    back into the task's directory; a missing file fails the commit, naming it. Counted first:
    a writer that is late only adds, and the names and sizes were proven before the rename (one
    that could swap a file for another between the two could as well rewrite a file's bytes,
    which no check here or in the per-file renames sees)."""
    if store.count_children(move.dest) == children:
        return
    names = store.list_names(move.dest)
    expected = {basename(e[1]) for e in mine}
    missing = expected - set(names)
    if missing:
        first = sorted(missing)[0]
        raise PathNotFoundError(f"{join(move.source, first)} vanished while its directory "
                                f"was moved to {move.dest} ({len(missing)} file(s) missing)",
                                join(move.dest, first))
    sides = {checksum_side_file(n) for n in expected}
    extra = [n for n in names if n not in expected and n not in sides]
    if extra:
        store.mkdirs(move.source)
        for name in extra:
            here, back = join(move.dest, name), join(move.source, name)
            if store.stat(here).is_dir:
                store.rename_dir(here, back)
            else:
                store.rename_file(here, back)


def move_task_directories(store: ManagedStore, moves: Sequence[DirectoryMove],
                          entries: list[RenameEntry], *, sized: bool = False) -> dict[str, int]:
    """Move each of ``moves`` (directories of one task) whole when it holds exactly its
    entries of ``entries`` (all of that task's renames); returns the destinations moved, with
    how many of the entries each held. The others are left to per-file renames. ``sized``:
    every source of the task was found a regular file of its size while the commit was
    planned (``JobPlan.checked_sources``)."""
    moved: dict[str, int] = {}
    tally = Tally()
    for move, mine, expected in _mirrored(moves, entries):
        children = None if expected is None else _holds_exactly(store, move.source, expected,
                                                                sized)
        if children is None:
            tally.incr(st.COMMITTER_DIRECTORY_MOVE_FALLBACKS)
            continue
        try:
            store.rename_dir(move.source, move.dest)
        except StoreError:
            # The destination appeared, the source is gone (an earlier attempt of this commit
            # moved it: per-file recovery proves each file), or the store refused: per file.
            tally.incr(st.COMMITTER_DIRECTORY_MOVE_FALLBACKS)
            continue
        _after_move(store, move, mine, children)
        moved[move.dest] = len(mine)
        tally.incr(st.COMMITTER_FILES_IN_MOVED_DIRECTORIES, len(mine))
    store.stats.merge(tally)
    return moved
