"""``cleanup DEST [--older-than DURATION] [--dry-run]``: remove stale job directories only.

A job directory under ``DEST/_temporary`` is removed only when ``status`` calls it *stale*:
not committed (``_SUCCESS`` does not name it) and with nothing in it modified for
``--older-than`` (default 24h). In-progress jobs, directories that are not manifest committer
jobs, and jobs whose age cannot be told (an object store with no file in the job directory) are
never touched. ``--include-committed`` also removes the leftovers of committed jobs. Each job is
re-examined just before it is deleted, so one that woke up since the scan is kept. Removal is
the engine's own cleanup: task attempt directories in parallel, then the job directory, then
``_temporary`` if it is empty.

Exit status: 0 done (also when there was nothing to remove); 1 some directory could not be
removed; 2 bad arguments or DEST missing.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, Command
from committer.cli.paths import open_location
from committer.cli.status import (
    COMMITTED,
    DEFAULT_STALE_AFTER,
    STALE,
    JobInfo,
    require_destination,
    scan_destination,
    stale_after_arg,
)
from committer.cli.units import human_duration
from committer.errors import ManifestCommitterError
from committer.job.cleanup import cleanup_job
from committer.layout import TEMPORARY_DIR, JobLayout
from committer.store import ManagedStore

FORMAT = "manifest-committer.cleanup/1"


def _still_removable(store: ManagedStore, dest: str, job: JobInfo, older_than: float,
                     states: set[str]) -> bool:
    for again in scan_destination(store, dest, older_than).jobs:
        if again.path == job.path:
            return again.state in states
    return False  # gone already


def _remove(store: ManagedStore, dest: str, job: JobInfo) -> str | None:
    """Remove one job directory; the error text if it failed."""
    assert job.job_id is not None
    layout = JobLayout(dest, job.job_id, job.attempts[-1] if job.attempts else 0,
                       hadoop_naming=job.layout == "hadoop")
    try:
        with ThreadPoolExecutor(store.config.io_threads, thread_name_prefix="cleanup") as pool:
            cleanup_job(store, layout, store.config, pool)
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
    chosen = [j for j in status.jobs if j.state in states]
    kept = [j for j in status.jobs if j.state not in states]
    removed: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for job in chosen:
        entry = job.to_json(status.now)
        if args.dry_run:
            removed.append(entry)
            continue
        if not _still_removable(store, dest, job, args.older_than, states):
            kept.append(job)
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
            "kept": [{"name": j.name, "job_id": j.job_id, "state": j.state} for j in kept],
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
            sys.stdout.write(f"kept {j.path} ({j.state}{f': {j.note}' if j.note else ''})\n")
    return EXIT_PROBLEMS if failed else EXIT_OK


COMMAND = Command(
    name="cleanup",
    help="remove stale job directories under DEST/_temporary (and say which)",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
