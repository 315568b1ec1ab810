"""``commit-job`` and ``abort-job``: the job side of the protocol, from the command line.

``commit-job DEST --job-id ID [--attempt N]`` commits the task manifests under DEST's job
attempt directory (this project's ``_temporary/manifest_<ID>/NN`` or Hadoop's
``_temporary/<ID>/NN``) exactly as a Spark driver would, and prints the summary that was
written to ``_SUCCESS``. Manifests that job commit refuses (another job's, a source outside its
task, a destination outside DEST, a destination claimed twice) are listed one per line, and no
file is moved. ``--conf`` takes the committer's Hadoop keys (io threads, validate output,
summary report directory, ...).

``abort-job DEST --job-id ID`` first rolls back a commit of that job (attempt ``--attempt``)
that started and did not finish: every file it renamed into DEST goes back to its task
directory, data an overwrite moved aside (``replaced/``) is restored, directories it created
are removed if empty and the previous ``_SUCCESS`` comes back (as ``rollback`` does). Then it
deletes the job's directory under ``_temporary`` (every attempt), and nothing else;
``_temporary`` goes too if it is then empty. A commit past its point of no return
(``cleaning``) is not undone: its cleanup is finished. If the rollback fails, the job
directory is kept (exit status 1) so that ``rollback`` can be run again.

Exit status: 0 committed / aborted; 1 the commit failed or was refused, or the job directory
could not be removed; 2 bad arguments, DEST missing, or no such job under DEST.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, CliError, Command
from committer.cli.destination import require_destination
from committer.cli.paths import open_location
from committer.cli.units import human_duration, human_size
from committer.errors import (
    ConfigError,
    JobConflictError,
    ManifestCommitterError,
    UntrustedManifestError,
)
from committer.job import JobCommitter
from committer.layout import JobLayout
from committer.statistics import REQUESTS, STORE_IO_REQUEST, STORE_IO_REQUEST_RACED, WAITS
from committer.store import ManagedStore
from manifest_schema import SuccessData

COMMIT_FORMAT = "manifest-committer.commit-job/1"
ABORT_FORMAT = "manifest-committer.abort-job/1"
STAGES = ("job_stage_load_manifests", "job_stage_create_target_dirs", "job_stage_rename_files",
          "job_stage_optional_validate_output", "job_stage_save_success_marker",
          "job_stage_cleanup")


def _layout(args: argparse.Namespace, dest: str) -> JobLayout:
    try:
        return JobLayout(dest, args.job_id, args.attempt)
    except ConfigError as e:
        raise CliError(str(e)) from None


def find_job(store: ManagedStore, layout: JobLayout, *, attempt_dir: bool) -> JobLayout:
    """The layout whose job (attempt) directory exists: ours first, then Hadoop's naming."""
    for candidate in (layout, layout.with_hadoop_naming()):
        if store.exists(candidate.attempt_dir if attempt_dir else candidate.job_dir):
            return candidate
    where = layout.attempt_dir if attempt_dir else layout.job_dir
    which = f" attempt {layout.attempt:02d}" if attempt_dir else ""
    raise CliError(f"no job {layout.job_id}{which} under {layout.temporary_dir} (looked for "
                   f"{where} and the Hadoop naming without 'manifest_')")


def _stage_ms(summary: SuccessData) -> dict[str, int]:
    means = summary.iostatistics.meanstatistics
    return {name: means[f"{name}.mean"].sum for name in STAGES if f"{name}.mean" in means}


def _waits_ms(summary: SuccessData) -> dict[str, int]:
    """The waits on the static rate cap and on throttling back-off that the commit had."""
    means = summary.iostatistics.meanstatistics
    return {name: means[f"{name}.mean"].sum for name, _ in WAITS if f"{name}.mean" in means}


def _requests(summary: SuccessData) -> dict[str, int]:
    """The requests the commit sent up to ``_SUCCESS``, and its races (a cloud store's)."""
    counters = summary.iostatistics.counters
    return {name: counters[name] for name, _ in REQUESTS if name in counters}


def commit_document(layout: JobLayout, summary: SuccessData) -> dict[str, Any]:
    counters = summary.iostatistics.counters
    mean = summary.iostatistics.meanstatistics.get("committer_commit_job.mean")
    return {
        "format": COMMIT_FORMAT, "job_id": layout.job_id, "attempt": layout.attempt,
        "destination": layout.dest, "job_directory": layout.job_dir,
        "layout": "hadoop" if layout.hadoop_naming else "manifest",
        "success": summary.success,
        "files": counters.get("committer_files_committed", 0),
        "bytes": counters.get("committer_bytes_committed", 0),
        "tasks": counters.get("committer_tasks_completed", 0),
        "directories": int(summary.diagnostics.get("directories", "0")),
        "duration_ms": mean.sum if mean is not None else None,
        "stages_ms": _stage_ms(summary),
        "waits_ms": _waits_ms(summary),
        "requests": _requests(summary),
        "summary": summary.to_json(),
    }


def _print_commit(doc: dict[str, Any]) -> None:
    console = render.stdout_console()
    duration = doc["duration_ms"]
    console.print(render.key_values("Job committed", [
        ("job id", doc["job_id"]), ("attempt", f"{doc['attempt']:02d}"),
        ("destination", doc["destination"]),
        ("layout", "Hadoop ManifestCommitter" if doc["layout"] == "hadoop" else "this project"),
        ("tasks", f"{doc['tasks']:,}"), ("files", f"{doc['files']:,}"),
        ("bytes", f"{human_size(doc['bytes'])} ({doc['bytes']:,})"),
        ("directories", f"{doc['directories']:,}"),
        ("duration", "-" if duration is None else human_duration(duration / 1000)),
    ]))
    if doc["stages_ms"]:
        console.print(render.table("Stages", ["stage", "time"],
                                   [[k.removeprefix("job_stage_"), human_duration(v / 1000)]
                                    for k, v in doc["stages_ms"].items()], right=["time"]))
    if doc["requests"]:
        requests = doc["requests"]
        sent = requests.get(STORE_IO_REQUEST, 0)
        labels = dict(REQUESTS)

        def count(name: str, value: int) -> str:
            share = f" ({value / sent:.1%})" if name == STORE_IO_REQUEST_RACED and sent else ""
            return f"{value:,}{share}"

        console.print(render.table("Requests (up to _SUCCESS)", ["requests", "count", "statistic"],
                                   [[labels[k], count(k, v), k] for k, v in requests.items()],
                                   right=["count"]))
    if doc["waits_ms"]:
        labels = dict(WAITS)
        console.print(render.table("Waits (threads' waits add up; the stage's is wall time)",
                                   ["wait", "time", "statistic"],
                                   [[labels[k], human_duration(v / 1000), k]
                                    for k, v in doc["waits_ms"].items()], right=["time"]))


def _commit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="the job's destination directory")
    p.add_argument("--job-id", required=True, metavar="ID",
                   help="the job id (Spark: spark.sql.sources.writeJobUUID)")
    p.add_argument("--attempt", type=int, default=0, metavar="N", help="job attempt (default 0)")
    p.add_argument("--dynamic-partition-overwrite", action="store_true",
                   help="replace the partitions the job wrote (Spark's dynamic overwrite mode)")


class _DropRestatedFailure(logging.Filter):
    """The engine logs a failed commit before raising it; the CLI reports the raised error as
    its one line on stderr, so the log record would only say the same thing twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.ERROR and isinstance(record.msg, str)
                    and record.msg.startswith("job %s commit failed"))


def _commit(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    layout = find_job(store, _layout(args, dest), attempt_dir=True)
    with render.progress_bars() as bars:
        committer = JobCommitter(dest, layout.job_id, job_attempt=layout.attempt,
                                 config=store.config, store=store, progress=bars.callback,
                                 hadoop_naming=layout.hadoop_naming,
                                 dynamic_partition_overwrite=args.dynamic_partition_overwrite)
        job_log = logging.getLogger("committer.job")
        restated = _DropRestatedFailure()
        if not args.debug:
            job_log.addFilter(restated)
        try:
            summary = committer.commit()
        except UntrustedManifestError as e:
            for line in e.problems:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
            raise CliError(f"job commit refused {len(e.problems)} problem(s) in the manifests "
                           "(listed on stdout); no file was moved", EXIT_PROBLEMS) from None
        except JobConflictError as e:
            raise CliError(str(e), EXIT_PROBLEMS) from None
        except ManifestCommitterError as e:
            first, _, rest = str(e).partition("\n")
            if rest:
                sys.stdout.write(rest.strip("\n") + "\n")
            raise CliError(first, EXIT_PROBLEMS) from e
        finally:
            job_log.removeFilter(restated)
    doc = commit_document(layout, summary)
    if args.json:
        render.emit_json(doc)
    else:
        _print_commit(doc)
    return EXIT_OK


def _abort_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="the job's destination directory")
    p.add_argument("--job-id", required=True, metavar="ID", help="the job id")
    p.add_argument("--attempt", type=int, default=0, metavar="N",
                   help="job attempt (default 0); the whole job directory is removed")


def _abort(args: argparse.Namespace) -> int:
    dest, store = open_location(args, args.dest)
    require_destination(store, dest)
    layout = find_job(store, _layout(args, dest), attempt_dir=False)
    committer = JobCommitter(dest, layout.job_id, job_attempt=layout.attempt,
                             config=store.config, store=store,
                             hadoop_naming=layout.hadoop_naming)
    committer.abort()  # never raises (an abort must not mask what caused it): check instead
    removed = not store.exists(layout.job_dir)
    if args.json:
        render.emit_json({"format": ABORT_FORMAT, "job_id": layout.job_id,
                          "destination": dest, "job_directory": layout.job_dir,
                          "removed": removed})
    elif removed:
        sys.stdout.write(f"aborted job {layout.job_id}: removed {layout.job_dir}\n")
    if not removed:
        raise CliError(f"could not remove {layout.job_dir} (see the log above)", EXIT_PROBLEMS)
    return EXIT_OK


COMMIT_JOB = Command(
    name="commit-job",
    help="commit a job from its task manifests and print the _SUCCESS summary",
    description=__doc__ or "",
    add_arguments=_commit_arguments,
    run=_commit,
)

ABORT_JOB = Command(
    name="abort-job",
    help="roll back one job's started commit (renamed files go back, moved-aside data is "
         "restored), then delete its directory under DEST/_temporary",
    description=__doc__ or "",
    add_arguments=_abort_arguments,
    run=_abort,
)
