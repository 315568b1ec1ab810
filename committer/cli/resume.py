"""``resume DEST [--job-id ID]``: finish a job commit that was interrupted (driver killed).

The commit continues from its journal (``_temporary/.../NN/_journal.json``) exactly as the
original would have finished: the remaining renames, ``_SUCCESS``, the history record, cleanup.
Manifests that changed since the commit was planned are refused. Without ``--job-id`` the one
interrupted commit under DEST is resumed (several: name one; ``status`` lists them).

Exit status: 0 committed; 1 the resume failed or was refused; 2 bad arguments, DEST missing, or
no interrupted commit under DEST.
"""

from __future__ import annotations

import argparse
import sys

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, CliError, Command
from committer.cli.destination import require_destination
from committer.cli.paths import open_location
from committer.errors import JobConflictError, ManifestCommitterError
from committer.job.durability.interrupted import find_interrupted
from committer.job.resume import resume

FORMAT = "manifest-committer.resume/1"


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="destination directory of the job")
    p.add_argument("--job-id", metavar="ID", default=None,
                   help="the job to act on (default: the only interrupted commit under DEST)")


def _run(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    try:
        found = find_interrupted(store, dest, args.job_id)
    except JobConflictError as e:
        raise CliError(str(e)) from None
    plan = found.resume_would()
    try:
        with render.progress_bars(False if args.json else None) as bars:
            summary = resume(dest, found.job_id, config=store.config, store=store,
                             progress=bars.callback)
    except ManifestCommitterError as e:
        if args.json:
            render.emit_json({"format": FORMAT, "destination": dest, "job_id": found.job_id,
                              "state": found.state, "ok": False, "error": str(e)})
        else:
            sys.stdout.write(f"resume of job {found.job_id} (state {found.state}) FAILED: "
                             f"{e}\n")
        return EXIT_PROBLEMS
    files = summary.metrics.get("committer_files_committed")
    if args.json:
        render.emit_json({"format": FORMAT, "destination": dest, "job_id": found.job_id,
                          "state": found.state, "ok": True, "did": plan,
                          "summary": summary.to_json()})
    else:
        sys.stdout.write(f"resumed job {found.job_id} from state {found.state} ({plan}): "
                         f"committed, {files} file(s)\n")
    return EXIT_OK


COMMAND = Command(
    name="resume",
    help="finish an interrupted job commit under DEST from its journal",
    description=__doc__ or "",
    add_arguments=add_job_arguments,
    run=_run,
)
