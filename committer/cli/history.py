"""``history DEST``: the jobs committed into DEST, oldest first.

One record per commit, kept in ``DEST/_manifest_committer/history/<jobId>.json``: job id, time,
mode (append, static-overwrite, dynamic-overwrite), files, bytes and tasks. A job id listed here
is never committed twice: committing it again returns its first summary.

Exit status: 0 always (an empty history is not a problem); 2 bad arguments or DEST missing.
"""

from __future__ import annotations

import argparse
import sys
import time

from committer.cli import render
from committer.cli.command import EXIT_OK, Command
from committer.cli.destination import require_destination
from committer.cli.paths import open_location
from committer.cli.units import human_size
from committer.job.durability.history import list_history

FORMAT = "manifest-committer.history/1"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="destination directory")


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


def _run(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    records = list_history(store, dest)
    if args.json:
        render.emit_json({"format": FORMAT, "destination": dest, "commits": [
            {"job_id": r.job_id, "attempt": r.attempt, "mode": r.mode,
             "committed": r.committed_ms, "files": r.files, "bytes": r.bytes,
             "tasks": r.tasks} for r in records]})
        return EXIT_OK
    if not records:
        sys.stdout.write(f"no commits recorded under {dest}\n")
        return EXIT_OK
    rows = [(_when(r.committed_ms), r.job_id, r.mode, str(r.files), human_size(r.bytes),
             str(r.tasks)) for r in records]
    render.stdout_console().print(render.table(
        f"commit history of {dest}", ("committed (UTC)", "job", "mode", "files", "bytes",
                                      "tasks"), rows))
    return EXIT_OK


COMMAND = Command(
    name="history",
    help="list the jobs committed into DEST (time, mode, files, bytes)",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
