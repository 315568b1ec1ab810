"""Job commit of one new partition per task on the ADLS Gen2 stub and the GCS move proxy.

The layout of ``dir-commit``'s own-partition jobs (task ``t`` writes all its files into its own
new partition ``p=<t>``), committed on the two object-store rename paths the emulators lack:

- **adls-directories**: ``committer.testing.adls_stub`` with a hierarchical namespace, the
  directory fast path on (the default): each task's partition should move with one Data Lake
  rename of its directory;
- **adls-per-file**: the same account with ``mapreduce.manifest.committer.rename.directories``
  false: one Data Lake rename per file;
- **gcs-move**: fake-gcs-server behind ``committer.testing.gcs_move_proxy`` (GCS's
  ``objects.moveTo``). GCS has no directory rename, so the fast path does not apply
  (``Store.renames_directories`` is false): one move per file, with the fast path left on.

Every trial starts its own server (a fresh stub; a fresh fake-gcs-server and proxy), writes the
files and commits the tasks through ``TaskAttemptCommitter`` (untimed), then times
``JobCommitter.commit()`` in a fresh interpreter (``benchmarks/store_trial.py``), counts the
requests the server received during the commit, checks that the destination holds exactly the
expected files (names and sizes) and ``_SUCCESS``, and stops the server. Repetitions alternate
the order of the trials. The stubs are Python servers on this machine: their timings say little
about the services; the request counts are what carries over.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, markdown_table, summarize
from benchmarks.emulators.runner import enter_emulator
from benchmarks.emulators.scenario import PreparedJob, Scenario, prepare
from committer import statistics as st
from committer.config import CommitterConfig
from committer.store import open_store
from committer.testing.adls_stub import adls_stub
from committer.testing.gcs_move_proxy import gcs_move_proxy

NAME = "dir-stores"
TITLE = ("Job commit of one new partition per task on the ADLS Gen2 stub (directory fast path "
         "on and off) and the GCS move proxy")
RENAME_DIRECTORIES_KEY = "mapreduce.manifest.committer.rename.directories"
#: trial -> (server, CommitterConfig fields)
TRIALS: dict[str, tuple[str, dict[str, Any]]] = {
    "adls-directories": ("adls", {}),
    "adls-per-file": ("adls", {"rename_directories": False}),
    "gcs-move": ("gcs-move", {}),
}
#: the engine's counters the report shows (all of them are in the results)
COUNTERS = (st.OP_RENAME_DIRECTORY, st.COMMITTER_FILES_IN_MOVED_DIRECTORIES,
            st.COMMITTER_DIRECTORY_MOVE_FALLBACKS, st.OP_RENAME, st.OP_LIST_STATUS,
            st.OP_GET_FILE_STATUS, st.OP_MKDIRS, st.OP_READ_FILE, st.OP_DELETE)
TRIAL_TIMEOUT_S = 1800


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _trial_names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in TRIALS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown trial(s) {bad}; choose from {list(TRIALS)}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dirstores-tasks", type=_positive, default=50,
                   help="tasks, each writing its own new partition p=<t> (default: %(default)s)")
    p.add_argument("--dirstores-files-per-task", type=_positive, default=100,
                   help="files per task (default: %(default)s)")
    p.add_argument("--dirstores-size", type=int, default=64,
                   help="bytes per file (default: %(default)s)")
    p.add_argument("--dirstores-repeats", type=_positive, default=2,
                   help="repetitions; the order of the trials alternates (default: %(default)s)")
    p.add_argument("--dirstores-trials", type=_trial_names, default=list(TRIALS),
                   help=f"comma-separated, of {', '.join(TRIALS)} (default: all)")
    p.add_argument("--dirstores-writers", type=_positive, default=16,
                   help="threads writing the files in the untimed set-up (default: %(default)s)")


@dataclass
class _Server:
    """A running store server and how to reach it; ``ops`` lists the requests it received."""

    root: str  # scheme://bucket, a new container / bucket
    options: dict[str, Any]
    ops: Callable[[], list[str]]
    reset_log: Callable[[], None]


@contextlib.contextmanager
def _server(kind: str) -> Iterator[_Server]:
    """A fresh server for one trial, stopped when the block ends."""
    if kind == "adls":
        with adls_stub(hierarchical=True) as stub:
            yield _Server(f"abfs://fs{uuid.uuid4().hex[:12]}", dict(stub.storage_options),
                          stub.ops, stub.reset_log)
        return
    with contextlib.ExitStack() as stack:
        emulator = enter_emulator(stack, "gcs")
        proxy = stack.enter_context(gcs_move_proxy(emulator.endpoint))
        yield _Server(f"gs://b{uuid.uuid4().hex[:16]}", dict(proxy.storage_options),
                      proxy.ops, proxy.reset_log)
    if emulator.process.poll() is None:
        raise RuntimeError(f"fake-gcs-server (pid {emulator.pid}) still running after stop")


def _timed_commit(server: _Server, job: PreparedJob, config: dict[str, Any]) -> dict[str, Any]:
    params = {"dest": job.dest, "job_id": job.job_id, "committed": job.committed,
              "storage_options": server.options, "config": config}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(params, f)
        path = Path(f.name)
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.store_trial", str(path)],
                              cwd=ROOT, capture_output=True, text=True,
                              timeout=TRIAL_TIMEOUT_S, check=False)
    finally:
        path.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"job commit trial failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def verify_destination(server: _Server, job: PreparedJob) -> list[str]:
    """Check that the destination holds exactly the job's files, each of its size, and
    ``_SUCCESS``, and that the job's temporary directory is gone; returns the committer's own
    files left there (``_``-prefixed: history records and the like)."""
    store = open_store(server.root, CommitterConfig(storage_options=server.options))
    try:
        cut = len(job.dest) + 1
        found = {s.path[cut:]: s.size for s in store.walk_files(job.dest)}
    finally:
        store.backend.close()
    expected = {dst[cut:] for _, dst in job.pairs}
    data = {k: v for k, v in found.items() if not k.startswith("_")}
    missing, extra = sorted(expected - data.keys()), sorted(data.keys() - expected)
    wrong = sorted(k for k in expected & data.keys() if data[k] != job.scenario.size)
    if missing or extra or wrong:
        raise AssertionError(
            f"{job.dest}: {len(missing)} files missing (e.g. {missing[:3]}), {len(extra)} "
            f"unexpected (e.g. {extra[:3]}), {len(wrong)} of the wrong size "
            f"(e.g. {wrong[:3]})")
    own = sorted(k for k in found if k.startswith("_"))
    if "_SUCCESS" not in own:
        raise AssertionError(f"{job.dest}: no _SUCCESS after the commit")
    left = [k for k in own if k.startswith("_temporary/")]
    if left:
        raise AssertionError(f"{job.dest}: {len(left)} files left in _temporary "
                             f"(e.g. {left[:3]})")
    return own


def run_trial(name: str, scenario: Scenario, writers: int) -> dict[str, Any]:
    """One trial on a fresh server: untimed set-up, the timed commit, requests, verification."""
    kind, config = TRIALS[name]
    with _server(kind) as server:
        t0 = time.perf_counter()
        job = prepare(server.root, server.options, scenario, writers, own_partitions=True)
        setup_seconds = time.perf_counter() - t0
        server.reset_log()
        load = os.getloadavg()
        answer = _timed_commit(server, job, config)
        requests = dict(sorted(Counter(server.ops()).items()))
        committer_files = verify_destination(server, job)
    counters = answer["summary_counters"]
    if counters.get(st.COMMITTER_FILES_COMMITTED) != scenario.files:
        raise AssertionError(f"{name}: {counters.get(st.COMMITTER_FILES_COMMITTED)} files "
                             f"committed, expected {scenario.files}")
    after_marker = {k: v - counters.get(k, 0) for k, v in answer["store_counters"].items()
                    if k.startswith("op_") and v != counters.get(k, 0)}
    return {
        "server": kind,
        "config": config,
        "elapsed": answer["elapsed"],
        "files_per_second": scenario.files / answer["elapsed"],
        "setup_seconds": setup_seconds,
        "renames_directories": answer["renames_directories"],
        "summary_counters": counters,
        "store_counters": answer["store_counters"],
        "after_marker_counters": dict(sorted(after_marker.items())),
        "requests": requests,
        "requests_total": sum(requests.values()),
        "committer_files_left": committer_files,
        "load_average_at_start": [round(x, 2) for x in load],
    }


def _same_or_range(values: list[int]) -> int | dict[str, int]:
    return values[0] if len(set(values)) == 1 else {"min": min(values), "max": max(values)}


def _summary(name: str, reps: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    runs = [r[name] for r in reps]
    counter_names = sorted({k for r in runs for k in r["summary_counters"]})
    request_ops = sorted({k for r in runs for k in r["requests"]})
    return {
        "server": runs[0]["server"],
        "config": runs[0]["config"],
        "renames_directories": runs[0]["renames_directories"],
        "elapsed": summarize([r["elapsed"] for r in runs]),
        "files_per_second": summarize([r["files_per_second"] for r in runs]),
        "counters": {k: _same_or_range([int(r["summary_counters"].get(k, 0)) for r in runs])
                     for k in counter_names},
        "after_marker_counters": {
            k: _same_or_range([int(r["after_marker_counters"].get(k, 0)) for r in runs])
            for k in sorted({k for r in runs for k in r["after_marker_counters"]})},
        "requests": {k: _same_or_range([int(r["requests"].get(k, 0)) for r in runs])
                     for k in request_ops},
        "requests_total": _same_or_range([int(r["requests_total"]) for r in runs]),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    scenario = Scenario(args.dirstores_tasks, args.dirstores_files_per_task,
                        partitions=args.dirstores_tasks, size=args.dirstores_size)
    names: list[str] = list(args.dirstores_trials)
    reps: list[dict[str, dict[str, Any]]] = []
    orders: list[list[str]] = []  # the results are saved with sorted keys
    load_before = os.getloadavg()
    for rep in range(args.dirstores_repeats):
        order = names if rep % 2 == 0 else list(reversed(names))
        orders.append(order)
        results: dict[str, dict[str, Any]] = {}
        for name in order:
            results[name] = run_trial(name, scenario, args.dirstores_writers)
            if not getattr(args, "quiet", False):
                r = results[name]
                print(f"  [{NAME} rep {rep + 1}] {name}: {r['elapsed']:.3f} s "
                      f"({r['files_per_second']:,.0f} files/s, "
                      f"{r['summary_counters'].get(st.OP_RENAME_DIRECTORY, 0)} directory "
                      f"renames, {r['summary_counters'].get(st.OP_RENAME, 0)} file renames, "
                      f"{r['requests_total']} requests)", flush=True)
        reps.append(results)
    load_after = os.getloadavg()
    ratios: dict[str, Any] = {}
    if {"adls-directories", "adls-per-file"} <= set(names):
        ratios["adls_per_file_over_directories_elapsed"] = summarize(
            [r["adls-per-file"]["elapsed"] / r["adls-directories"]["elapsed"] for r in reps])
        ratios["adls_per_file_over_directories_requests"] = summarize(
            [r["adls-per-file"]["requests_total"] / r["adls-directories"]["requests_total"]
             for r in reps])
    return {
        "suite": NAME,
        "tasks": scenario.tasks,
        "files_per_task": scenario.files_per_task,
        "files": scenario.files,
        "size": scenario.size,
        "repeats": args.dirstores_repeats,
        "trials": names,
        "summary": {n: _summary(n, reps) for n in names},
        "ratios": ratios,
        "repetitions": reps,
        "orders": orders,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }


def _fmt(s: dict[str, float] | None, digits: int = 3) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


def _count(v: int | dict[str, int] | None) -> str:
    if v is None:
        return "0"
    if isinstance(v, dict):
        return f"{v['min']:,}-{v['max']:,}"
    return f"{v:,}"


def report(result: dict[str, Any]) -> str:
    summary = result["summary"]
    lines = [
        f"{result['tasks']} tasks x {result['files_per_task']} files of {result['size']} bytes "
        f"({result['files']:,} files), task t writing all its files into its own new partition "
        f"p=<t>; {result['repeats']} repetitions, trial order alternated, each trial on a fresh "
        "server; destination checked after every trial. Load average before "
        f"{' / '.join(str(x) for x in result['load_average_before'])}, after "
        f"{' / '.join(str(x) for x in result['load_average_after'])}.",
        "",
        "The stubs are Python servers on this machine: their times say little about the "
        "services; the request counts are the portable part. Counters are the commit's "
        "summary (_SUCCESS) iostatistics, which end before the marker is saved; what the "
        "store counted after that is in its own column. Requests are what the server "
        "received during the whole commit. A range is min-max over the repetitions.",
        "",
    ]
    rows = []
    for name in result["trials"]:
        s = summary[name]
        fast_path = ("n/a (no directory rename)" if not s["renames_directories"]
                     else "off" if s["config"].get("rename_directories") is False else "on")
        after = ", ".join(f"{k} {_count(v)}" for k, v in s["after_marker_counters"].items())
        rows.append([name, fast_path, _fmt(s["elapsed"]), _fmt(s["files_per_second"], 0),
                     *(_count(s["counters"].get(c)) for c in COUNTERS), after or "-",
                     _count(s["requests_total"])])
    lines.append(markdown_table(
        ["trial", "directory fast path", "job commit s: median (min-max)",
         "files/s: median (min-max)", *COUNTERS, "after _SUCCESS (its save, cleanup)",
         "requests to the server"], rows))
    lines += ["", "Requests the server received during the commit, by operation:", ""]
    ops = sorted({op for n in result["trials"] for op in summary[n]["requests"]})
    lines.append(markdown_table(
        ["operation", *result["trials"]],
        [[op, *(_count(summary[n]["requests"].get(op)) for n in result["trials"])]
         for op in ops]))
    r = result["ratios"]
    if r:
        lines += ["", "ADLS, fast path off / on, per repetition: job commit time "
                  f"{_fmt(r['adls_per_file_over_directories_elapsed'], 2)} x, requests "
                  f"{_fmt(r['adls_per_file_over_directories_requests'], 2)} x."]
    return "\n".join(lines)
