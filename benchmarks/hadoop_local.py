"""Job commit on local disk: this committer against Hadoop's own ManifestCommitter, one run.

The job is the one ``local-commit`` uses (default 1,000 tasks x 100 empty files, each task
writing into all 100 partitions: 100,000 files), generated fresh (untimed) for every trial with
real TaskManifest/1 manifests. Each trial runs in its own process (``benchmarks/trial.py``):

- **ours**: ``JobCommitter.commit()`` in a fresh interpreter, the job in this project's layout
  (``_temporary/manifest_<jobId>``).
- **hadoop-manifest**: ``ManifestCommitter.commitJob`` from pyspark's hadoop-client-api jar, in a
  fresh JVM (a local SparkSession, driven over Py4J), the same job generated in Hadoop's layout
  (``_temporary/<jobId>``, manifests' source paths under it). JVM start is not timed; a small
  job is committed first in that JVM (untimed) so class loading and JIT warm-up are not timed
  either. Hadoop's defaults otherwise (its io threads, parallel cleanup, no output validation).
- **hadoop-v1** (skip with ``--no-v1``): ``FileOutputCommitter`` algorithm v1 ``commitJob``, same
  JVM set-up, of the same files laid out as v1 task commit leaves them
  (``_temporary/0/task_.../``, see ``benchmarks/hadoop_v1.py``).

Both commits are checked afterwards: every file in the destination, no task trees left, and
each committer's own files-committed count (v1 has none: the destination is counted).
Repetitions alternate the order; the ratios (ours / Hadoop, files per second) are computed per
repetition.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from typing import Any

from benchmarks.common import markdown_table, mib, quiesce, run_trial, summarize
from benchmarks.hadoop_v1 import generate_v1
from benchmarks.jobtree import Shape, generate, remove, verify_committed

NAME = "hadoop-local"
TITLE = "Job commit on local disk vs Hadoop's ManifestCommitter"
TARGET_RATIO = 2.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    # Only registered options the other suites do not define (argparse refuses duplicates when
    # several suites run in one invocation): shared names are looked up with getattr defaults.
    existing = {a.dest for a in p._actions}
    for flag, kind, default in (("--tasks", int, 1000), ("--files-per-task", int, 100),
                                ("--partitions", int, 100), ("--repeats", int, 2),
                                ("--workdir", str, None)):
        if flag.lstrip("-").replace("-", "_") not in existing:
            p.add_argument(flag, type=kind, default=default)
    p.add_argument("--hadoop-io-threads", type=int, default=None,
                   help="mapreduce.manifest.committer.io.threads (default: Hadoop's default)")
    p.add_argument("--no-v1", action="store_true",
                   help="skip Hadoop's FileOutputCommitter v1 trials")
    p.add_argument("--no-hadoop-warmup", action="store_true",
                   help="time Hadoop's commit in a cold JVM (no small warm-up job first)")


def _trial(shape: Shape, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    remove(shape)
    t0 = time.perf_counter()
    if kind == "hadoop-v1":
        generate_v1(shape)
    else:
        generate(shape)
    setup = time.perf_counter() - t0
    quiesce()
    result = run_trial(kind, {"shape": shape.to_json(), **params})
    if kind != "hadoop-v1":
        verify_committed(shape)
    if result.get("files_committed") != shape.files:
        raise AssertionError(f"{kind}: committer reports {result.get('files_committed')} "
                             f"files committed, expected {shape.files}")
    remove(shape)
    result["setup_seconds"] = setup
    result["files_per_second"] = shape.files / result["elapsed"]
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = getattr(args, "workdir", None) or tempfile.mkdtemp(prefix="bench-hadoop-",
                                                                  dir="/tmp")
    os.makedirs(workdir, exist_ok=True)
    ours_shape = Shape(os.path.join(workdir, "dest"), getattr(args, "tasks", 1000),
                       getattr(args, "files_per_task", 100), getattr(args, "partitions", 100))
    hadoop_shape = replace(ours_shape, hadoop_naming=True)
    hadoop_conf: dict[str, str] = {}
    if args.hadoop_io_threads:
        hadoop_conf["mapreduce.manifest.committer.io.threads"] = str(args.hadoop_io_threads)
    hadoop_params = {"hadoop_conf": hadoop_conf, "warmup": not args.no_hadoop_warmup}
    reps: list[dict[str, Any]] = []
    try:
        for rep in range(getattr(args, "repeats", 2)):
            kinds = ["ours", "hadoop-manifest"] + ([] if args.no_v1 else ["hadoop-v1"])
            order = kinds if rep % 2 == 0 else kinds[::-1]
            got: dict[str, dict[str, Any]] = {}
            for kind in order:
                if kind == "ours":
                    got[kind] = _trial(ours_shape, "ours", {"config": {}})
                elif kind == "hadoop-manifest":
                    got[kind] = _trial(hadoop_shape, kind, hadoop_params)
                else:
                    got[kind] = _trial(ours_shape, kind, {"warmup": hadoop_params["warmup"]})
                _log(args, rep, kind, got[kind])
            v1 = got.get("hadoop-v1")
            reps.append({
                "order": order,
                "ours": got["ours"],
                "hadoop": got["hadoop-manifest"],
                "v1": v1,
                "ratio": got["ours"]["files_per_second"]
                / got["hadoop-manifest"]["files_per_second"],
                "ratio_v1": got["ours"]["files_per_second"] / v1["files_per_second"]
                if v1 else None,
            })
    finally:
        remove(ours_shape)
    return {
        "suite": NAME,
        "shape": {"tasks": ours_shape.tasks, "files_per_task": ours_shape.files_per_task,
                  "partitions": ours_shape.partitions, "files": ours_shape.files},
        "workdir": workdir,
        "hadoop_conf": hadoop_conf,
        "hadoop_warmup": not args.no_hadoop_warmup,
        "repetitions": reps,
        "ratio": summarize([r["ratio"] for r in reps]),
        "ours_files_per_second": summarize([r["ours"]["files_per_second"] for r in reps]),
        "hadoop_files_per_second": summarize([r["hadoop"]["files_per_second"] for r in reps]),
        "ratio_v1": summarize([r["ratio_v1"] for r in reps if r["v1"]]),
        "target_ratio": TARGET_RATIO,
    }


def _log(args: argparse.Namespace, rep: int, what: str, r: dict[str, Any]) -> None:
    if getattr(args, "quiet", False):
        return
    print(f"  [{NAME} rep {rep + 1}] {what}: {r['files_per_second']:,.0f} files/s "
          f"({r['elapsed']:.2f} s; set-up {r['setup_seconds']:.0f} s)", flush=True)


def _stages(r: dict[str, Any]) -> str:
    return " / ".join(f"{v:.2f}" for v in r.get("stages", {}).values())


def report(result: dict[str, Any]) -> str:
    s = result["shape"]
    jvm = "after a warm-up job in the same JVM" if result["hadoop_warmup"] else "in a cold JVM"
    settings = str(result["hadoop_conf"]) if result["hadoop_conf"] else "its default settings"
    lines = [
        f"{s['files']:,} files ({s['tasks']:,} tasks x {s['files_per_task']} files, "
        f"{s['partitions']} partitions), {len(result['repetitions'])} repetitions, order "
        f"alternated; Hadoop {jvm}, {settings}.",
        "",
    ]
    rows = []
    for i, r in enumerate(result["repetitions"], 1):
        rows.append([i, " then ".join(r["order"]),
                     round(r["ours"]["files_per_second"]), f"{r['ours']['elapsed']:.2f}",
                     _stages(r["ours"]),
                     round(r["hadoop"]["files_per_second"]), f"{r['hadoop']['elapsed']:.2f}",
                     _stages(r["hadoop"]), f"{r['ratio']:.2f}",
                     round(r["v1"]["files_per_second"]) if r.get("v1") else "-",
                     f"{r['ratio_v1']:.2f}" if r.get("ratio_v1") else "-"])
    lines.append(markdown_table(
        ["rep", "order", "ours files/s", "ours s", "ours stages s (load / mkdirs / rename / "
         "cleanup)", "Hadoop manifest files/s", "Hadoop manifest s",
         "Hadoop manifest stages s (load / mkdirs / rename)", "ratio ours / manifest",
         "Hadoop v1 files/s", "ratio ours / v1"], rows))
    ratio = result["ratio"]
    lines += [
        "",
        f"**Ratio ours / Hadoop ManifestCommitter: median {ratio['median']:.2f}** "
        f"(min {ratio['min']:.2f}, max {ratio['max']:.2f}); target >= {result['target_ratio']}.",
        *([f"Ratio ours / Hadoop FileOutputCommitter v1: median "
           f"{result['ratio_v1']['median']:.2f}."] if result.get("ratio_v1", {}).get("n") else []),
        "All committed every file (destination listed, task trees gone, each committer's own "
        "files-committed count = " f"{s['files']:,}).",
        "Peak RSS of our commit process: "
        + ", ".join(f"{mib(r['ours']['peak_rss'])} MiB" for r in result["repetitions"]) + ".",
    ]
    return "\n".join(lines)
