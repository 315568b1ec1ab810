"""``cleanup DEST [--older-than DURATION] [--dry-run]``: remove stale job directories only.

A job directory under ``DEST/_temporary`` is removed only when ``status`` calls it *stale*:
not committed (``_SUCCESS`` does not name it) and with nothing in it modified for
``--older-than`` (default 24h). In-progress jobs, directories that are not manifest committer
jobs, and jobs whose age cannot be told (an object store with no file in the job directory) are
never touched. ``--include-committed`` also removes the leftovers of committed jobs.

A job directory holding an **interrupted commit** (a commit journal in any state before
``cleaning``, a commit that is rolling back, or data an overwrite moved aside into
``replaced/``) is never removed, with or without ``--include-committed`` or ``--dry-run``,
however old it is: deleting it would lose the data the commit replaced and the record needed to
finish or undo it. It is listed as "interrupted — run `manifest-committer resume` or
`rollback`", with what each would do. Each job is re-examined just before it is deleted, so
one that woke up (or began committing) since the scan is kept. Removal is the engine's own
cleanup: task attempt directories in parallel, then the job directory, then ``_temporary`` if
it is empty.

Exit status: 0 done (also when there was nothing to remove); 1 some directory could not be
removed; 2 bad arguments or DEST missing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, Command
from committer.cli.destination import (
    COMMITTED,
    DEFAULT_STALE_AFTER,
    INTERRUPTED,
    STALE,
    JobInfo,
    require_destination,
    scan_destination,
    stale_after_arg,
)
from committer.cli.paths import open_location
from committer.cli.units import human_duration
from committer.errors import ManifestCommitterError
from committer.job.stages.cleanup import cleanup_job
from committer.job.stages.context import stage_context
from committer.layout import TEMPORARY_DIR, JobLayout
from committer.store import ManagedStore

FORMAT = "manifest-committer.cleanup/1"


def _rescan(store: ManagedStore, dest: str, job: JobInfo, older_than: float) -> JobInfo | None:
    """The job as it is now (``None`` if it is gone), to re-check just before deleting it."""
    for again in scan_destination(store, dest, older_than).jobs:
        if again.path == job.path:
            return again
    return None


def _kept_json(job: JobInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": job.name, "job_id": job.job_id, "state": job.state}
    if job.state == INTERRUPTED:
        entry["note"] = job.note
        entry["interrupted_commits"] = [c.to_json() for c in job.interrupted]
    return entry


def _kept_line(job: JobInfo) -> str:
    if job.state == INTERRUPTED:
        details = "; ".join(c.describe() for c in job.interrupted)
        return f"kept {job.path} ({job.note}: {details})\n"
    return f"kept {job.path} ({job.state}{f': {job.note}' if job.note else ''})\n"


def _remove(store: ManagedStore, dest: str, job: JobInfo) -> str | None:
    """Remove one job directory; the error text if it failed."""
    assert job.job_id is not None
    layout = JobLayout(dest, job.job_id, job.attempts[-1] if job.attempts else 0,
                       hadoop_naming=job.layout == "hadoop")
    try:
        with stage_context(store, layout, store.config, None, "cleanup") as ctx:
            cleanup_job(ctx)
    except ManifestCommitterError as e:
        return str(e)
    return None


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="destination directory of the jobs")
    p.add_argument("--older-than", type=stale_after_arg, default=DEFAULT_STALE_AFTER,
                   metavar="DURATION",
                   help=f"idle time after which an uncommitted job is stale (default "
                        f"{DEFAULT_STALE_AFTER}; e.g. 30m, 12h, 7d)")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed; remove "
                   "nothing")
    p.add_argument("--include-committed", action="store_true",
                   help="also remove directories left by jobs that _SUCCESS says committed")


def _run(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    status = scan_destination(store, dest, args.older_than)
    states = {STALE, COMMITTED} if args.include_committed else {STALE}
    # An interrupted commit is its own state, so it is never among the states removed.
    chosen = [j for j in status.jobs if j.state in states and not j.interrupted]
    kept = [j for j in status.jobs if j not in chosen]
    removed: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for job in chosen:
        entry = job.to_json(status.now)
        if args.dry_run:
            removed.append(entry)
            continue
        now = _rescan(store, dest, job, args.older_than)
        if now is None:
            kept.append(job)  # gone already: removed by someone else meanwhile
            continue
        if now.state not in states or now.interrupted:
            kept.append(now)
            continue
        error = _remove(store, dest, job)
        if error is None:
            removed.append(entry)
        else:
            entry["error"] = error
            failed.append(entry)
    if args.json:
        render.emit_json({
            "format": FORMAT, "destination": dest, "dry_run": args.dry_run,
            "older_than_seconds": args.older_than,
            "include_committed": args.include_committed,
            "removed": removed, "failed": failed,
            "kept": [_kept_json(j) for j in kept],
        })
    else:
        verb = "would remove" if args.dry_run else "removed"
        for e in removed:
            age = e["age_seconds"]
            sys.stdout.write(f"{verb} {e['path']} (job {e['job_id']}, {e['state']}, idle "
                             f"{'?' if age is None else human_duration(age)}, "
                             f"{e['tasks']} task dir(s), {e['manifests']} manifest(s))\n")
        for e in failed:
            sys.stdout.write(f"FAILED to remove {e['path']}: {e['error']}\n")
        if not removed and not failed:
            sys.stdout.write(f"nothing to remove: {len(status.jobs)} job director"
                             f"{'y' if len(status.jobs) == 1 else 'ies'} under {TEMPORARY_DIR}/,"
                             f" none {' or '.join(sorted(states))} (older than "
                             f"{human_duration(args.older_than)})\n")
        for j in kept:
            sys.stdout.write(_kept_line(j))
    return EXIT_PROBLEMS if failed else EXIT_OK


COMMAND = Command(
    name="cleanup",
    help="remove stale job directories under DEST/_temporary (and say which)",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
