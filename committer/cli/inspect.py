"""``inspect PATH``: say what PATH is and show it.

PATH may be a task manifest, a ``_SUCCESS`` file, a summary report, a job attempt directory
(or its job directory: the latest attempt is shown), a directory of manifests, or a destination
directory. For manifests it shows the job and task ids, files, bytes, directories, partitions,
the largest tasks and files, skew across tasks, task commit timings and the merged IOStatistics;
``--files`` lists the file entries instead, a page at a time (``--offset``/``--limit``; limit 0
streams every entry). Manifests are read one at a time: memory does not grow with the number of
files.

Exit status: 0 shown; 1 shown, but some manifests in a directory could not be read;
2 PATH is missing, unreadable or not one of the kinds above.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, CliError, Command
from committer.cli.destination import (
    DEFAULT_STALE_AFTER,
    print_status,
    scan_destination,
    success_json,
)
from committer.cli.documents import (
    Found,
    Kind,
    Loaded,
    ManifestFile,
    identify,
    iter_manifests,
)
from committer.cli.paths import open_location
from committer.cli.stats import JobStats, TaskRow
from committer.cli.units import human_duration, human_size, parse_duration
from committer.store import ManagedStore
from manifest_schema import FormatError, IOStatisticsSnapshot, SuccessData, iter_file_entries
from manifest_schema.uris import uri_to_location

FORMAT = "manifest-committer.inspect/1"
FILES_FORMAT = "manifest-committer.inspect-files/1"
# Beyond this many rows a rich table (which holds every row until printed) gives way to plain
# tab-separated lines written as they are read.
TABLE_ROWS = 1000


def read_threads(store: ManagedStore) -> int:
    # Local reads are CPU-bound parsing under the GIL: a few threads suffice. Cloud reads wait on
    # the network: use the configured pool.
    return min(store.config.io_threads, 4 if store.name == "local" else 32)


def _ts(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _bytes(value: float) -> str:
    return human_size(int(value))


def _ms(value: int | float | None) -> str:
    return "-" if value is None else human_duration(float(value) / 1000.0)


def _relative(uri: str, dest: str | None) -> str:
    """A destination as a person reads it: decoded, and relative to the job's destination."""
    try:
        loc = uri_to_location(uri)
    except ValueError:
        return uri
    if dest is not None and loc.startswith(dest + "/"):
        return loc[len(dest) + 1:]
    return loc


# -- IOStatistics ------------------------------------------------------------------------------

def print_iostatistics(title: str, snap: IOStatisticsSnapshot) -> None:
    console = render.stdout_console()
    durations = []
    for key, mean in sorted(snap.meanstatistics.items()):
        if not key.endswith(".mean") or mean.samples == 0:
            continue
        name = key[: -len(".mean")]
        durations.append([name, f"{mean.samples:,}", _ms(mean.mean),
                          _ms(snap.minimums.get(f"{name}.min")),
                          _ms(snap.maximums.get(f"{name}.max")), _ms(mean.sum)])
    timed = {d[0] for d in durations}
    counters = [[k, f"{v:,}"] for k, v in sorted(snap.counters.items())
                if v and k not in timed]
    if not durations and not counters:
        console.print(f"{title}: none recorded")
        return
    if durations:
        console.print(render.table(f"{title}: timed operations",
                                   ["operation", "count", "mean", "min", "max", "total"],
                                   durations, right=["count", "mean", "min", "max", "total"]))
    if counters:
        console.print(render.table(f"{title}: counters", ["counter", "value"], counters,
                                   right=["value"]))


# -- manifests (a single one, a job attempt, a directory of them) --------------------------------

def _header(found: Found) -> list[tuple[str, str]]:
    rows = [("path", found.location)]
    if found.job_id is not None:
        rows.append(("job id", found.job_id))
    if found.attempt is not None:
        rows.append(("job attempt", f"{found.attempt:02d}"))
    if found.hadoop_naming is not None:
        rows.append(("layout", "Hadoop ManifestCommitter (_temporary/<jobId>)" if
                     found.hadoop_naming else "this project (_temporary/manifest_<jobId>)"))
    if found.dest is not None:
        rows.append(("destination", found.dest))
    return rows


def aggregate(store: ManagedStore, found: Found, top: int) -> JobStats:
    stats = JobStats(top=top)
    if found.kind is Kind.MANIFEST:
        assert found.document is not None
        stats.add(Loaded(ManifestFile(found.location, 0, None), found.document))
        return stats
    with render.progress_bars() as bars:
        total = len(found.manifests)
        for i, loaded in enumerate(iter_manifests(store, found.manifests, read_threads(store))):
            stats.add(loaded)
            bars.update("reading manifests", i + 1, total)
    return stats


def manifests_json(found: Found, stats: JobStats) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": FORMAT, "kind": str(found.kind), "path": found.location,
        "job_id": found.job_id, "attempt": found.attempt, "destination": found.dest,
        "layout": None if found.hadoop_naming is None else (
            "hadoop" if found.hadoop_naming else "manifest"),
        "manifests": len(stats.tasks) + len(stats.problems),
        "tasks": len(stats.tasks), "files": stats.files, "bytes": stats.bytes,
        "directories": stats.directories, "partitions": stats.partitions,
        "job_ids_in_manifests": dict(sorted(stats.job_ids.items())),
        "largest_tasks": [t.to_json() for t in stats.largest_tasks()],
        "largest_files": [{"destination": d, "size": z} for z, d in stats.largest_files()],
        "skew": stats.skew(), "timings": stats.timings(),
        "iostatistics": stats.iostatistics.to_json(),
        "problems": [{"file": f, "reason": r} for f, r in stats.problems],
    }
    if found.kind is Kind.MANIFEST and found.document is not None:
        d = found.document
        doc["task_id"] = d.get("taskID")
        doc["task_attempt_id"] = d.get("taskAttemptID")
        doc["task_attempt_dir"] = d.get("taskAttemptDir")
        doc["extra_data"] = d.get("extraData") or {}
    return doc


def _task_rows(tasks: list[TaskRow]) -> list[list[str]]:
    return [[t.task_id, t.task_attempt_id, f"{t.files:,}", human_size(t.bytes),
             f"{t.directories:,}", _ms(t.commit_ms)] for t in tasks]


def print_manifests(found: Found, stats: JobStats) -> None:
    console = render.stdout_console()
    title = {Kind.MANIFEST: "Task manifest", Kind.JOB_ATTEMPT: "Job attempt directory",
             Kind.MANIFEST_DIR: "Directory of task manifests"}[found.kind]
    rows = _header(found)
    if found.kind is Kind.MANIFEST and found.document is not None:
        d = found.document
        rows += [("task id", str(d.get("taskID"))),
                 ("task attempt", str(d.get("taskAttemptID"))),
                 ("task attempt dir", str(d.get("taskAttemptDir") or "-"))]
    else:
        rows.append(("manifests", f"{len(stats.tasks) + len(stats.problems):,}"))
        if len(stats.job_ids) > 1:
            rows.append(("job ids seen", ", ".join(f"{k} ({v})" for k, v in
                                                   sorted(stats.job_ids.items()))))
        elif found.job_id is None and stats.job_ids:
            rows.append(("job id", next(iter(stats.job_ids))))
    rows += [("files", f"{stats.files:,}"),
             ("bytes", f"{human_size(stats.bytes)} ({stats.bytes:,})"),
             ("directories", f"{stats.directories:,}"),
             ("partitions", f"{stats.partitions:,} (distinct parent directories of files)")]
    timings = stats.timings()
    if found.kind is not Kind.MANIFEST and timings["first_manifest_at"] is not None:
        span = timings["last_manifest_at"] - timings["first_manifest_at"]
        rows.append(("manifests written", f"{_ts(timings['first_manifest_at'])} .. "
                                          f"{_ts(timings['last_manifest_at'])} "
                                          f"({human_duration(span)})"))
    console.print(render.key_values(title, rows))
    if found.kind is Kind.MANIFEST:
        extra = (found.document or {}).get("extraData") or {}
        if extra:
            console.print(render.key_values("extraData", [(k, str(v)) for k, v in
                                                           sorted(extra.items())]))
    elif stats.tasks:
        console.print(render.table(
            f"Largest tasks (top {len(stats.largest_tasks())} of {len(stats.tasks):,})",
            ["task", "attempt", "files", "bytes", "dirs", "commit"],
            _task_rows(stats.largest_tasks()), right=["files", "bytes", "dirs", "commit"]))
        skew = stats.skew()
        skew_rows = []
        for label, key in (("files per task", "files_per_task"),
                           ("bytes per task", "bytes_per_task")):
            s = skew[key]
            fmt = _count if key == "files_per_task" else _bytes
            skew_rows.append([label, fmt(s["min"]), fmt(s["median"]), fmt(s["mean"]),
                              fmt(s["max"]), f"{s['max_over_mean']}"])
        commit = timings["task_commit_ms"]
        if commit is not None:
            skew_rows.append(["task commit time", _ms(commit["min"]), _ms(commit["median"]),
                              _ms(commit["mean"]), _ms(commit["max"]),
                              f"{commit['max_over_mean']}"])
        console.print(render.table("Skew across tasks (max/mean 1.0 = perfectly even)",
                                   ["", "min", "median", "mean", "max", "max/mean"], skew_rows,
                                   right=["min", "median", "mean", "max", "max/mean"]))
    largest = stats.largest_files()
    if largest:
        console.print(render.table(f"Largest files (top {len(largest)})", ["destination", "size"],
                                   [[_relative(d, found.dest), human_size(z)]
                                    for z, d in largest], right=["size"]))
    print_iostatistics("IOStatistics (task side, merged)" if found.kind is not Kind.MANIFEST
                       else "IOStatistics", stats.iostatistics)
    if stats.problems:
        console.print(render.table(f"Unreadable manifests ({len(stats.problems)})",
                                   ["manifest", "reason"], [list(p) for p in stats.problems]))


# -- _SUCCESS and summary reports ---------------------------------------------------------------

def success_document(found: Found, s: SuccessData) -> dict[str, Any]:
    out = success_json(s)
    out.update({
        "format": FORMAT, "kind": str(found.kind), "path": found.location,
        "description": s.description, "job_id_source": s.job_id_source,
        "metrics": dict(sorted(s.metrics.items())),
        "diagnostics": dict(sorted(s.diagnostics.items())), "filenames": list(s.filenames),
        "iostatistics": s.iostatistics.to_json(),
    })
    return out


def print_success(found: Found, s: SuccessData) -> None:
    console = render.stdout_console()
    doc = success_json(s)
    title = "_SUCCESS (job summary)" if found.kind is Kind.SUCCESS else "Job summary report"
    rows = [("path", found.location), ("job id", s.job_id),
            ("result", "success" if s.success else "FAILED"),
            ("state / stage", f"{s.state or '-'} / {s.stage or '-'}"),
            ("committer", s.committer), ("date", s.date), ("hostname", s.hostname),
            ("description", s.description or "-"),
            ("files committed", "?" if doc["files"] is None else f"{doc['files']:,}"),
            ("bytes committed", "?" if doc["bytes"] is None else
             f"{human_size(doc['bytes'])} ({doc['bytes']:,})"),
            ("file names recorded", f"{len(s.filenames)} (the first destinations only)")]
    console.print(render.key_values(title, rows))
    if s.metrics:
        console.print(render.table("Metrics", ["metric", "value"],
                                   [[k, f"{v:,}"] for k, v in sorted(s.metrics.items())],
                                   right=["value"]))
    if s.diagnostics:
        console.print(render.key_values("Diagnostics", sorted(s.diagnostics.items())))
    print_iostatistics("IOStatistics (job)", s.iostatistics)


# -- --files ------------------------------------------------------------------------------------

def list_files(store: ManagedStore, found: Found, args: argparse.Namespace) -> int:
    offset, limit = args.offset, args.limit
    if found.kind in (Kind.SUCCESS, Kind.SUMMARY):
        assert found.success is not None
        names: list[tuple[str, tuple[str | None, str, int | None, str | None]]] = [
            (found.location, (None, f, None, None)) for f in found.success.filenames]
        return _emit_files(found, iter(names), offset, limit, args.json,
                           note="_SUCCESS records only the first destinations")
    if found.kind is Kind.DESTINATION:
        raise CliError(f"{found.location}: --files needs manifests: give a job attempt "
                       "directory (see `manifest-committer status`) or a manifest")

    def entries() -> Iterator[tuple[str, tuple[str | None, str, int | None, str | None]]]:
        if found.kind is Kind.MANIFEST:
            assert found.document is not None
            for e in iter_file_entries(found.document, found.location):
                yield found.location, e
            return
        for loaded in iter_manifests(store, found.manifests, read_threads(store)):
            if loaded.doc is None:
                continue
            try:
                for e in iter_file_entries(loaded.doc, loaded.file.path):
                    yield loaded.file.path, e
            except FormatError:
                continue  # listed as far as it is readable; `validate` names the problem

    return _emit_files(found, entries(), offset, limit, args.json, note=None)


def _emit_files(found: Found,
                entries: Iterator[tuple[str, tuple[str | None, str, int | None, str | None]]],
                offset: int, limit: int, as_json: bool,
                note: str | None) -> int:
    out = sys.stdout
    end = None if limit == 0 else offset + limit
    stream = limit == 0 or limit > TABLE_ROWS
    rows: list[list[str]] = []
    total = shown = 0
    if as_json:
        # Written entry by entry so that `--limit 0` over a million files stays small.
        head = {"format": FILES_FORMAT, "kind": str(found.kind), "path": found.location,
                "offset": offset, "limit": limit, "note": note}
        out.write(render.json_line(head).decode()[:-1] + ',"files":[')
    elif stream:
        out.write("source\tdestination\tsize\tetag\tmanifest\n")
    for manifest, (s, d, z, e) in entries:
        if total >= offset and (end is None or total < end):
            if as_json:
                item = {"manifest": manifest, "source": s, "destination": d, "size": z,
                        "etag": e}
                out.write(("," if shown else "") + "\n" + render.json_line(item).decode())
            elif stream:
                out.write(f"{s or '-'}\t{d}\t{'-' if z is None else z}\t{e or '-'}\t{manifest}\n")
            else:
                rows.append([s or "-", d, "-" if z is None else human_size(z), e or "-"])
            shown += 1
        total += 1
    if as_json:
        out.write(f'\n],"shown":{shown},"total":{total}}}\n')
    elif not stream:
        render.stdout_console().print(render.table(
            f"Files {offset + 1 if shown else 0}-{offset + shown} of {total:,}"
            + (f" ({note})" if note else ""),
            ["source", "destination", "size", "etag"], rows, right=["size"]))
        if end is not None and end < total:
            out.write(f"more: --offset {end} --limit {limit}\n")
    out.flush()
    return EXIT_OK


# -- the command --------------------------------------------------------------------------------

def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH",
                   help="task manifest, _SUCCESS, summary report, job attempt directory, "
                        "directory of manifests, or destination directory")
    p.add_argument("--files", action="store_true",
                   help="list the file entries (source, destination, size, etag) instead")
    p.add_argument("--offset", type=int, default=0, metavar="N",
                   help="with --files: skip the first N entries (default 0)")
    p.add_argument("--limit", type=int, default=100, metavar="N",
                   help="with --files: show N entries (default 100; 0 = all, streamed)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="how many of the largest tasks and files to show (default 10)")


def _run(args: argparse.Namespace) -> int:
    if args.offset < 0 or args.limit < 0 or args.top < 0:
        raise CliError("--offset, --limit and --top must not be negative")
    location, store = open_location(args, args.path)
    found = identify(store, location)
    if args.files:
        return list_files(store, found, args)
    if found.kind in (Kind.SUCCESS, Kind.SUMMARY):
        assert found.success is not None
        if args.json:
            render.emit_json(success_document(found, found.success))
        else:
            print_success(found, found.success)
        return EXIT_OK
    if found.kind is Kind.DESTINATION:
        status = scan_destination(store, location, parse_duration(DEFAULT_STALE_AFTER))
        if args.json:
            doc = status.to_json()
            doc.update({"format": FORMAT, "kind": str(found.kind), "path": location})
            render.emit_json(doc)
        else:
            print_status(status)
        return EXIT_OK
    stats = aggregate(store, found, args.top)
    if found.dest is None:
        found.dest = stats.dest
    if args.json:
        render.emit_json(manifests_json(found, stats))
    else:
        print_manifests(found, stats)
    return EXIT_PROBLEMS if stats.problems else EXIT_OK


COMMAND = Command(
    name="inspect",
    help="say what PATH is (manifest, _SUCCESS, job attempt, destination) and show it",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
