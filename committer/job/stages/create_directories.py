"""Job commit, stage 2: create the aggregate set of destination directories.

Only *leaf* directories are created (each ``mkdirs`` makes its parents), each once however many
tasks listed it, in parallel. A directory that a concurrent job creates first is fine. A file
standing where a directory must go is deleted only when ``delete_target_files`` is set;
otherwise the commit stops, naming it, before any file is renamed.

With dynamic partition overwrite, the partitions this job writes have already been moved aside
into the job directory (by the commit transaction, ``durability/``), so the renames that follow
replace them whole, as Spark's own protocol does, while a rollback can still restore them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from committer.errors import PathExistsError
from committer.job.stages.context import StageContext
from committer.job.stages.plan import JobPlan
from committer.parallel import Counter, run_parallel
from committer.store.managed import ManagedStore

STAGE = "create_directories"


def leaf_directories(paths: Iterable[str]) -> list[str]:
    """The paths that are no other path's ancestor."""
    ordered = sorted({p.rstrip("/") for p in paths})
    leaves = []
    for i, p in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) else ""
        if not nxt.startswith(p + "/"):
            leaves.append(p)
    return leaves


def _ancestors(path: str, stop: str) -> list[str]:
    """``path`` and its parents down to (not including) ``stop``, shallowest first."""
    out = []
    while path.startswith(stop + "/"):
        out.append(path)
        path = path.rpartition("/")[0]
    return out[::-1]


def _in_the_way(path: str) -> PathExistsError:
    return PathExistsError(
        f"a file stands where directory {path} must be created (set "
        f"mapreduce.manifest.committer.delete.target.files=true to replace it)", path
    )


def _clear_ancestor(store: ManagedStore, path: str, delete_files: bool) -> None:
    """On a flat object store, a file ``path`` above a directory to create: refuse or delete."""
    status = store.stat_or_none(path)
    if status is None or status.is_dir:
        return
    if not delete_files:
        raise _in_the_way(path)
    store.delete_file(path)


def _make_directory(store: ManagedStore, path: str, dest: str, delete_files: bool) -> None:
    try:
        store.mkdirs(path)
        return
    except PathExistsError:
        if not delete_files:
            raise _in_the_way(path) from None
    for candidate in _ancestors(path, dest):  # find the file in the way, shallowest first
        status = store.stat_or_none(candidate)
        if status is not None and not status.is_dir:
            store.delete_file(candidate)
            break
    store.mkdirs(path)


def create_directories(ctx: StageContext, plan: JobPlan, moved_whole: Collection[str] = ()) -> int:
    """Create every leaf directory the plan needs; returns how many. A directory in
    ``moved_whole`` is not created (its rename creates it; an existing one would stop the
    rename), only its parent."""
    return make_directories(ctx, check_directories(ctx, plan, moved_whole))


def check_directories(ctx: StageContext, plan: JobPlan, moved_whole: Collection[str] = (),
                      absent: Collection[str] | None = None) -> list[str]:
    """What must happen before the first rename: on a flat object store, every directory to
    create and each of its ancestors checked for a file of its name (refused, or deleted with
    ``delete_target_files``); returns the leaves to create (:func:`make_directories`).
    ``absent``: paths the commit's plan found missing a moment ago (``durability/``), which
    hold no file and need no check: a new table's partitions need none."""
    store, config = ctx.store, ctx.config
    dest = ctx.layout.dest
    wanted = set(plan.directories)
    wanted.update(plan.partitions)
    if moved_whole:
        wanted.difference_update(moved_whole)
        wanted.update(d.rpartition("/")[0] for d in moved_whole)
    wanted.discard(dest)
    leaves = leaf_directories(wanted)
    if store.flat_walk:
        # A flat object store's directories are names: creating "p=1/q=2" sees nothing of an
        # object "p=1", which would stay beside the new directory (a file and a directory of
        # one name). A filesystem's mkdirs fails on it; here every ancestor of a leaf, and
        # the leaf, is checked, once, before anything is created or renamed.
        missing = set(absent or ())
        paths = sorted({a for leaf in leaves for a in _ancestors(leaf, dest)} - missing)
        run_parallel(ctx.pool, paths,
                     lambda p: _clear_ancestor(store, p, config.delete_target_files),
                     window=ctx.window)
    return leaves


def make_directories(ctx: StageContext, leaves: list[str]) -> int:
    """Create ``leaves`` (each ``mkdirs`` makes its parents) and the destination, all at once;
    returns how many leaves. On a flat object store (after :func:`check_directories`) the
    renames need none of them, so a commit runs this while its files are renamed. Where
    directories are real (a leaf's create makes its parents) the destination is created only
    when there is no leaf: it holds this job's directory, and asking again is a round trip
    more before the first rename (the answer: it exists)."""
    store, config = ctx.store, ctx.config
    dest = ctx.layout.dest
    counter = Counter()
    ctx.notify(STAGE, 0, len(leaves))
    run_parallel(
        ctx.pool,
        [*leaves] if leaves and store.renames_directories else [dest, *leaves],
        lambda p: store.mkdirs(p) if p == dest else
        _make_directory(store, p, dest, config.delete_target_files),
        window=ctx.window,
        on_result=lambda p, _r: None if p == dest else
        ctx.notify(STAGE, counter.add(1), len(leaves)),
    )
    return len(leaves)
