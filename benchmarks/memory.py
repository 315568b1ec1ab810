"""Peak RSS of a whole job commit of ``--memory-files`` files (default 1,000,000) on local disk.

The job is generated first (untimed, in this process; real empty files, real manifests), then
``JobCommitter.commit()`` runs in a fresh interpreter whose ``ru_maxrss`` is the figure: it
holds only the commit (and the interpreter with its imports, reported separately as the base).
Target: at most 300 MB.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from benchmarks.common import markdown_table, mib, quiesce, run_trial
from benchmarks.jobtree import Shape, generate, remove, verify_committed

NAME = "memory"
TITLE = "Peak RSS of a million-file job commit"
TARGET_MB = 300


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory-files", type=int, default=1_000_000,
                   help="files in the job (default 1,000,000)")
    p.add_argument("--memory-files-per-task", type=int, default=1000)
    p.add_argument("--memory-partitions", type=int, default=100)
    p.add_argument("--memory-workdir", default=None)
    p.add_argument("--keep", action="store_true", help="leave the committed data in place")


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = args.memory_workdir or tempfile.mkdtemp(prefix="bench-memory-", dir="/tmp")
    per_task = args.memory_files_per_task
    shape = Shape(os.path.join(workdir, "dest"), max(1, args.memory_files // per_task),
                  per_task, args.memory_partitions)
    try:
        t0 = time.perf_counter()
        generate(shape)
        setup = time.perf_counter() - t0
        if not getattr(args, "quiet", False):
            print(f"  [{NAME}] generated {shape.files:,} files in {setup:.0f} s", flush=True)
        quiesce()
        r = run_trial("ours", {"shape": shape.to_json()})
        verify_committed(shape)
    finally:
        if not args.keep:
            remove(shape)
    return {
        "suite": NAME,
        "shape": {"tasks": shape.tasks, "files_per_task": per_task,
                  "partitions": shape.partitions, "files": shape.files},
        "workdir": workdir,
        "setup_seconds": setup,
        "elapsed": r["elapsed"],
        "files_per_second": shape.files / r["elapsed"],
        "peak_rss": r["peak_rss"],
        "base_rss": r["base_rss"],
        "stages": r.get("stages", {}),
        "plan_spilled": r.get("plan_spilled"),
        "target_mb": TARGET_MB,
    }


def report(result: dict[str, Any]) -> str:
    s = result["shape"]
    peak = result["peak_rss"] / 1e6
    rows = [[f"{s['files']:,}", f"{s['tasks']:,} x {s['files_per_task']}",
             f"{mib(result['base_rss'])} MiB", f"{mib(result['peak_rss'])} MiB ({peak:.0f} MB)",
             f"{result['elapsed']:.1f}", round(result["files_per_second"]),
             result.get("plan_spilled")]]
    table = markdown_table(["files", "tasks x files", "RSS before commit", "peak RSS",
                            "commit s", "files/s", "plan spilled"], rows)
    verdict = "meets" if peak <= result["target_mb"] else "MISSES"
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in result["stages"].items())
    return (f"{table}\n\nPeak RSS {peak:.0f} MB {verdict} the target of at most "
            f"{result['target_mb']} MB. Stages: {stages}.")
