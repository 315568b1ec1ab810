"""``rollback DEST [--job-id ID] [--keep-job-dir]``: undo an interrupted job commit.

Every destination file that provably is one of the job's renamed files (its etag, or content
checksum, is the manifest's) is moved back to its task directory; data that an overwrite moved
aside, and files displaced by last-writer-wins, are put back; the job's ``_SUCCESS`` is removed
and the previous one restored; the directories the job created are removed if empty. DEST is
then as it was before the job, and the job directory is deleted (kept with ``--keep-job-dir``,
so the job can be committed again). A commit that passed its point of no return (``cleaning``:
the replaced data is being deleted) is refused: ``resume`` finishes it.

Exit status: 0 rolled back; 1 the rollback failed or was refused (whatever could not be undone
is named; the job directory is kept); 2 bad arguments, DEST missing, or no interrupted commit.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, CliError, Command
from committer.cli.destination import require_destination
from committer.cli.paths import open_location
from committer.cli.resume import add_job_arguments
from committer.errors import JobConflictError, ManifestCommitterError
from committer.job.durability.interrupted import find_interrupted
from committer.job.durability.rollback import rollback_job

FORMAT = "manifest-committer.rollback/1"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_job_arguments(p)
    p.add_argument("--keep-job-dir", action="store_true",
                   help="keep the job directory (task output back in place) instead of "
                        "deleting it")


def _run(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    try:
        found = find_interrupted(store, dest, args.job_id)
    except JobConflictError as e:
        raise CliError(str(e)) from None
    try:
        with render.progress_bars(False if args.json else None) as bars:
            report = rollback_job(store, found.layout, store.config, progress=bars.callback,
                                  cleanup=not args.keep_job_dir)
    except ManifestCommitterError as e:
        if args.json:
            render.emit_json({"format": FORMAT, "destination": dest, "job_id": found.job_id,
                              "state": found.state, "ok": False, "error": str(e)})
        else:
            sys.stdout.write(f"rollback of job {found.job_id} (state {found.state}) FAILED: "
                             f"{e}\n")
        return EXIT_PROBLEMS
    if args.json:
        render.emit_json({"format": FORMAT, "destination": dest, "ok": True,
                          **asdict(report)})
    else:
        sys.stdout.write(
            f"rolled back job {report.job_id} from state {report.state_before}: "
            f"{report.files_restored} file(s) moved back, {report.moved_aside_restored} "
            f"moved-aside tree(s) restored, {report.directories_removed} new director(ies) "
            f"removed, _SUCCESS {'removed' if report.success_marker_removed else 'untouched'}"
            "\n")
    return EXIT_OK


COMMAND = Command(
    name="rollback",
    help="undo an interrupted job commit under DEST: DEST as it was before the job",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
