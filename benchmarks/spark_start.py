"""How long a first PySpark session takes to start with the committer: prebuilt jar vs javac.

    python -m benchmarks.spark_start [--repeats R] [--out DIR]

Each trial is a fresh interpreter with an empty jar cache that times
``committer.spark.configure(builder)`` (finding or building the shim jar) and ``getOrCreate()``
(the JVM and the session) of a local session:

- ``prebuilt``: the jar the package carries for the installed Spark line (what a wheel gives),
  or in a checkout the one ``make setup`` built in place for the installed Spark;
- ``javac``: neither, so the shim is compiled from source on first use (the way every first
  session started before the wheel carried jars).

Trials alternate between the two, ``R`` of each. Results: ``<out>/spark_start.json`` and
``<out>/spark_start.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, machine

MODES = ("prebuilt", "javac")


def trial(mode: str) -> dict[str, Any]:
    """One first session, in this (fresh) process."""
    from pyspark.sql import SparkSession

    import committer.spark
    from committer.spark import build

    if mode == "javac":
        build.PREBUILT_ROOT = Path(tempfile.mkdtemp(prefix="no-prebuilt-"))
        build.IN_PLACE_ROOT = build.PREBUILT_ROOT / "in-place"
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    started = time.perf_counter()
    configured = committer.spark.configure(builder)
    jar_ready = time.perf_counter()
    spark = configured.getOrCreate()
    session_ready = time.perf_counter()
    jar = str(committer.spark.jar_path())
    spark.stop()
    return {"jar_s": jar_ready - started, "session_s": session_ready - jar_ready,
            "total_s": session_ready - started, "jar": jar}


def run(repeats: int) -> dict[str, Any]:
    trials: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for _ in range(repeats):
        for mode in MODES:
            with tempfile.TemporaryDirectory(prefix="spark-start-cache-") as cache:
                env = dict(os.environ, SPARK_MANIFEST_COMMITTER_CACHE=cache)
                env.pop("SPARK_MANIFEST_COMMITTER_JAR", None)
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.spark_start", "--trial", mode],
                    capture_output=True, text=True, env=env, timeout=600, check=False,
                )
                if done.returncode != 0:
                    raise RuntimeError(f"{mode} trial failed:\n{done.stderr[-3000:]}")
                trials[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    import pyspark

    medians = {
        mode: {key: statistics.median(t[key] for t in runs)
               for key in ("jar_s", "session_s", "total_s")}
        for mode, runs in trials.items()
    }
    return {"pyspark": pyspark.__version__, "repeats": repeats, "machine": machine(),
            "trials": trials, "median": medians}


def report(result: dict[str, Any]) -> str:
    lines = [
        f"# First PySpark session start (pyspark {result['pyspark']}, "
        f"median of {result['repeats']}, empty jar cache)",
        "",
        "| jar | configure (s) | getOrCreate (s) | total (s) | runs (total s) |",
        "|---|---:|---:|---:|---|",
    ]
    for mode in MODES:
        m = result["median"][mode]
        runs = ", ".join(f"{t['total_s']:.2f}" for t in result["trials"][mode])
        lines.append(f"| {mode} | {m['jar_s']:.2f} | {m['session_s']:.2f} | "
                     f"{m['total_s']:.2f} | {runs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_start")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--trial", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trial:
        print(json.dumps(trial(args.trial)), flush=True)
        return 0
    result = run(args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spark_start.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result)
    (args.out / "spark_start.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
