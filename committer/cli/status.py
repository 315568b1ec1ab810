"""``status DEST``: the jobs under ``DEST/_temporary`` and the last job committed into DEST.

Each job directory is classified as interrupted, committed-not-cleaned, stale, in-progress or
unknown (the meanings: ``committer/cli/destination.py``); ``--bytes`` also reads each job's
manifests to sum what its tasks would commit. For each interrupted commit the state its journal
records is shown with what ``resume`` and ``rollback`` would do.
"""

from __future__ import annotations

import argparse

from committer.cli import render
from committer.cli.command import EXIT_OK, Command
from committer.cli.destination import (
    DEFAULT_STALE_AFTER,
    print_status,
    require_destination,
    scan_destination,
    stale_after_arg,
)
from committer.cli.paths import open_location


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="destination directory of the jobs")
    p.add_argument("--stale-after", type=stale_after_arg, default=DEFAULT_STALE_AFTER,
                   metavar="DURATION",
                   help=f"uncommitted jobs idle this long are stale (default {DEFAULT_STALE_AFTER};"
                        " e.g. 30m, 12h, 7d)")
    p.add_argument("--bytes", action="store_true",
                   help="also read each job's manifests and sum the bytes its tasks would commit")


def _run(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    status = scan_destination(store, dest, args.stale_after, want_bytes=args.bytes,
                              threads=min(store.config.io_threads, 8))
    if args.json:
        render.emit_json(status.to_json())
    else:
        print_status(status)
    return EXIT_OK


COMMAND = Command(
    name="status",
    help="jobs under DEST/_temporary and the last job committed into DEST",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
