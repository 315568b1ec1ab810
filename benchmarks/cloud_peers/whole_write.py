"""``python -m benchmarks cloud-writes``: the same Spark job, a partitioned parquet write, through
each committer, task side included, to the simulated account through Hadoop's own connectors.

    python -m benchmarks cloud-writes --service adls --files 1000 --latency-ms 20 \\
        --p99-ms 200 --ops-limit 20000 --repeats 2

Rows (``--rows``, all by default), each a real local SparkSession (``local[--cores]``) in its
own interpreter and JVM (``spark_job.py``), its tasks writing parquet through the connector
(hadoop-azure's ABFS: Data Lake, or flat Blob through its Blob client; Google's GCS
connector):

- ``engine``: this project's protocol (``committer.spark.configure``), nothing else set: the
  shim's task commit saves the manifests through the connector, this engine commits the job
  over its own client;
- ``hadoop-defaults`` / ``hadoop-tuned``: Spark's binding for Hadoop's committers
  (spark-hadoop-cloud's ``PathOutputCommitProtocol`` with ``BindingParquetOutputCommitter``,
  ``mapreduce.outputcommitter.factory.scheme.abfs`` / ``.gs`` bound to the factory Hadoop binds
  by default), Hadoop's ManifestCommitter for task and job commit, with ``cloud-peers``'
  configurations (``connectors.committer_keys``: defaults, or 256 io threads and ABFS's rename
  rate limit off).

Every row: the account emptied; an untimed small write first (``spark_job.py``); the account's
statistics reset; the timed write. Per row: the write's wall from the driver, the CPU of the
row's process tree (the Python driver, the JVM and, for ``engine``, this engine's process),
Spark's SQL metrics and its stage (``stages``: job set-up and planning before the write
stage; the write stage, tasks writing and committing; ``task commit time`` summed over
tasks; ``job commit time``), the committer's own ``_SUCCESS`` statistics, the requests the
account served by operation, the simulator's CPU, the machine's load. The destination is then
checked from the account's listing (``check_destination``): every file the job must write,
named as Spark names it in its partition, none else, non-empty, their bytes those the
committer's ``_SUCCESS`` says it committed, no ``_temporary`` left; with ``--read-back``, the
table also read back through Spark and the connector, each file's rows checked. The rows run
alternated over ``--repeats`` passes; ratios are within a pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from benchmarks.cloud_peers import add_account_arguments
from benchmarks.common import ROOT, log_tail, markdown_table

NAME = "cloud-writes"
TITLE = "Whole Spark writes through each committer on a simulated account (Hadoop's connectors)"
SERVICES = ("adls", "blob", "gcs")
ROWS = ("engine", "hadoop-defaults", "hadoop-tuned")
#: the issue's targets (at 100,000 files): the engine's write at least this many times faster
TARGETS = {"hadoop-defaults": 2.0, "hadoop-tuned": 1.3}
BUCKET = "data"
TABLE = "table"
FACTORIES = {
    "abfs": "org.apache.hadoop.fs.azurebfs.commit.AzureManifestCommitterFactory",
    "gs": "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterFactory",
}
_SCRIPT = ROOT / "benchmarks" / "cloud_peers" / "spark_job.py"
_TIMEOUT_S = 3 * 3600.0
_FILE = re.compile(r"^p=(\d+)/part-(\d{5})-([0-9a-f-]{36})\.c000(?:\.snappy)?\.parquet$")


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--service", choices=SERVICES, default="adls")
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks of the job (default: files / 100, at least 1); each "
                             "writes files / tasks files, one a partition")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rows-per-file", type=int, default=16)
    parser.add_argument("--cores", type=int, default=8,
                        help="local[N]: task slots (the tasks wait on the store, not the CPU)")
    add_account_arguments(parser, gcs_move="the GCS connector's rename needs it")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"which rows, comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--read-back", action="store_true",
                        help="also read each destination back through Spark, every file's "
                             "rows checked (untimed)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="passes over the rows, each in the other order (alternated)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


# -- the destination -------------------------------------------------------------------------

def expected_files(files: int, tasks: int, partitions: int) -> dict[tuple[int, int], int]:
    """(partition, task) -> the file's index, for every file the job writes
    (``spark_job.py``: task t holds files [t * F, (t + 1) * F), file f in partition
    f % partitions)."""
    from benchmarks.cloud_peers.spark_job import job_shape

    per_task = job_shape(files, tasks, partitions)
    return {(f % partitions, f // per_task): f for f in range(files)}


def check_destination(objects: list[dict[str, Any]], table: str, files: int, tasks: int,
                      partitions: int, bytes_committed: int | None) -> dict[str, Any]:
    """The destination from the account's listing (``sim.objects``): ``destination_exact``
    when every expected file is there, named by one job, non-empty, nothing else but
    ``_SUCCESS``, directory markers and this engine's records (``_manifest_committer/``), no
    ``_temporary`` left, and the bytes are those the committer says it committed."""
    expected = expected_files(files, tasks, partitions)
    prefix = table.rstrip("/") + "/"
    entries = {o["key"][len(prefix):]: o for o in objects if o["key"].startswith(prefix)
               and not o.get("is_dir")}
    parents = {k.rsplit("/", 1)[0] for k in entries if "/" in k}
    found: dict[tuple[int, int], int] = {}
    jobs: set[str] = set()
    extra: list[str] = []
    temp: list[str] = []
    records = 0
    empty = 0
    for rel, o in entries.items():
        size = int(o["size"])
        m = _FILE.match(rel)
        if m is not None:
            key = (int(m.group(1)), int(m.group(2)))
            if key in found or key not in expected:
                extra.append(rel)
            found[key] = size
            jobs.add(m.group(3))
            empty += size == 0
        elif rel.split("/", 1)[0] == "_temporary":
            temp.append(rel)
        elif rel == "_SUCCESS":
            continue
        elif rel.startswith("_manifest_committer/"):
            records += 1  # this engine's history and lock: kept by design
        elif rel == "" or rel.endswith("/") or (size == 0 and rel in parents):
            continue  # a directory marker (the GCS connector's, ABFS's on a flat account)
        else:
            extra.append(rel)
    missing = [f"p={p}/part-{t:05d}-*" for (p, t) in expected if (p, t) not in found]
    total = sum(found.values())
    bytes_match = bytes_committed is not None and bytes_committed == total
    exact = not (missing or extra or temp or empty) and len(jobs) == 1 and bytes_match
    return {"destination_exact": exact, "files_found": len(found), "missing": len(missing),
            "extra": len(extra), "temporary_left": len(temp), "empty_files": empty,
            "job_names": len(jobs), "bytes_found": total, "bytes_committed": bytes_committed,
            "committer_records": records, "examples": (missing + extra + temp)[:5]}


def check_read_back(rows: list[list[Any]], files: int, tasks: int, partitions: int,
                    rows_per_file: int) -> dict[str, Any]:
    """Every file read back holds the rows of exactly its file, in its partition."""
    expected = expected_files(files, tasks, partitions)
    bad: list[str] = []
    seen: set[int] = set()
    for path, count, low, high, part, parts in rows:
        name = path.rsplit("/", 2)
        m = _FILE.match("/".join(name[-2:]))
        f = low // rows_per_file
        want = (m is not None and expected.get((int(m.group(1)), int(m.group(2)))) == f
                and count == rows_per_file and low == f * rows_per_file
                and high == low + rows_per_file - 1 and part == f % partitions and parts == 1)
        if not want or f in seen:
            bad.append(path)
        seen.add(f)
    ok = not bad and len(seen) == files
    return {"read_back_exact": ok, "files_read": len(rows), "read_back_bad": len(bad),
            "read_back_examples": bad[:3]}


# -- a row -----------------------------------------------------------------------------------

def _lines(stream: IO[str]) -> Iterator[dict[str, Any]]:
    for line in stream:
        if line.startswith("{"):
            yield json.loads(line)


def committer_stages(success: dict[str, Any]) -> dict[str, float]:
    """The committer's own stage timings from its ``_SUCCESS`` statistics (Hadoop's names,
    which this engine keeps), in seconds: job commit's stages and, where the committer
    aggregates its task commits' statistics into it (Hadoop's), the task stages summed over
    tasks. Stages that did not run are left out."""
    means = (success.get("iostatistics") or {}).get("meanstatistics") or {}
    out: dict[str, float] = {}
    for name, value in means.items():
        stage = str(name).removesuffix(".mean")
        if stage.startswith(("job_stage_", "task_stage_")) and not stage.endswith(
                ".failures") and isinstance(value, dict) and int(value.get("samples", 0)) > 0:
            out[stage] = float(value.get("sum", 0)) / 1000.0
    return out


def _counter(success: dict[str, Any], name: str) -> int | None:
    counters = (success.get("iostatistics") or {}).get("counters") or {}
    if name in counters:
        return int(counters[name])
    metrics = success.get("metrics") or {}
    return int(metrics[name]) if name in metrics else None


def run_row(sim: Any, args: argparse.Namespace, tasks: int, row: str, workdir: Path
            ) -> dict[str, Any]:
    """One row on an emptied account; the caller's ``sim``."""
    from benchmarks.cloud_peers.connectors import (
        DEFAULT_IO_THREADS,
        committer_keys,
        configuration_text,
        connector_jars,
        http_connections,
    )
    from committer.testing.connector_keys import connector_keys

    sim.reset()
    sim.populate([{"bucket": BUCKET, "key": "README", "data_b64": ""}])
    engine = row == "engine"
    root, keys = connector_keys(sim, args.service, BUCKET, engine=engine)
    threads = DEFAULT_IO_THREADS
    if not engine:
        threads, tuning = committer_keys(args.service, row == "hadoop-tuned")
        keys.update(tuning)
        scheme = root.split(":", 1)[0]
        keys[f"mapreduce.outputcommitter.factory.scheme.{scheme}"] = FACTORIES[scheme]
    spark_conf = {f"spark.hadoop.{k}": v for k, v in keys.items()}
    table = f"{root}/{TABLE}"
    params = {"committer": "engine" if engine else "hadoop", "dest": table,
              "warmup_dest": f"{root}/warmup", "spark_conf": spark_conf,
              "jars": connector_jars(), "java_options": http_connections(threads),
              "cores": args.cores, "files": args.files, "tasks": tasks,
              "partitions": args.partitions, "rows_per_file": args.rows_per_file}
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "params.json").write_text(json.dumps(params), encoding="utf-8")
    log = workdir / "row.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")]))
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, str(_SCRIPT), str(workdir / "params.json")],
                                cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    killer = threading.Timer(_TIMEOUT_S, proc.kill)
    killer.start()
    back: list[list[Any]] | None = None
    try:
        answers = _lines(proc.stdout)
        warm = next(answers, None)
        if warm is None:
            raise RuntimeError(f"the row's Spark job stopped before its write:\n{log_tail(log)}")
        sim.reset_stats()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        written = next(answers, None)
        stats = sim.stats()  # the timed write's requests alone
        objects = sim.objects(BUCKET, "")
        success_raw = _read_object(sim, f"{TABLE}/_SUCCESS")
        proc.stdin.write("read-back\n" if args.read_back else "done\n")
        proc.stdin.flush()
        if args.read_back and written is not None:
            answer = next(answers, None)
            back = answer.get("read_back") if answer else None
        code = proc.wait(timeout=600)
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if written is None or code != 0 or (args.read_back and back is None):
        raise RuntimeError(f"the row's Spark job failed (exit {code}):\n{log_tail(log)}")
    out: dict[str, Any] = dict(written["written"])
    success: dict[str, Any] = json.loads(success_raw) if success_raw else {}
    throttled = stats["throttled"]["bucket"] + stats["throttled"]["injected"]
    metrics = out["metrics"]
    out.update(
        warmup_s=warm["warm"]["seconds"],
        requests=stats["ops"] - throttled, throttled=throttled,
        requests_by_op=stats.get("by_op", {}), service_cpu_s=stats["cpu"]["total_s"],
        success_marker=success.get("success"),
        committer_stages=committer_stages(success),
        files_committed=_counter(success, "committer_files_committed"),
        breakdown=breakdown(float(out["wall_s"]), out["stages"], metrics),
        how=(("this project's ManifestCommitProtocol: the shim's task commit through the "
              "connector, this engine's job commit, nothing configured") if engine else
             (f"Spark's PathOutputCommitProtocol + BindingParquetOutputCommitter, "
              f"{FACTORIES[root.split(':', 1)[0]].rsplit('.', 1)[-1]} (Hadoop's "
              f"ManifestCommitter), {configuration_text(args.service, row == 'hadoop-tuned')}"))
        + f"; {_connector(args.service)}; local[{args.cores}]")
    out.update(check_destination(objects, TABLE, args.files, tasks, args.partitions,
                                 _counter(success, "committer_bytes_committed")))
    if metrics.get("number of written files") != args.files:
        out["destination_exact"] = False
        out.setdefault("examples", []).append(
            f"Spark says it wrote {metrics.get('number of written files')} files")
    if success.get("success") is not True:
        out["destination_exact"] = False
    if back is not None:
        out.update(check_read_back(back, args.files, tasks, args.partitions,
                                   args.rows_per_file))
        if not out["read_back_exact"]:
            out["destination_exact"] = False
    return out


def _read_object(sim: Any, key: str) -> bytes | None:
    """An object's bytes, read by this engine's store layer (None if there is none)."""
    from committer.config import CommitterConfig
    from committer.errors import ManifestCommitterError
    from committer.store import open_store

    uri = f"{sim.scheme}://{BUCKET}/{key}"
    try:
        with open_store(uri, CommitterConfig(storage_options=sim.trusted_options)) as store:
            data: bytes = store.read_bytes(uri)
            return data
    except (ManifestCommitterError, OSError):  # no marker: the row is reported not exact
        return None


def _connector(service: str) -> str:
    return {"adls": "hadoop-azure ABFS (Data Lake)", "blob": "hadoop-azure ABFS (Blob client)",
            "gcs": "the GCS connector"}[service]


def breakdown(wall: float, stages: list[dict[str, Any]], metrics: dict[str, float]
              ) -> dict[str, float]:
    """The write's wall split where Spark shows it: before the first stage (planning, the
    protocol's ``setupJob``), the stages (tasks writing and committing), ``job commit time``
    (the protocol's ``commitJob``), and the rest (between the stages' end and the commit,
    the driver's bookkeeping after it)."""
    first = min((float(s["start_s"]) for s in stages), default=0.0)
    end = max((float(s["start_s"]) + float(s["seconds"]) for s in stages), default=first)
    job_commit = float(metrics.get("job commit time", 0.0))
    return {"setup_s": first, "tasks_s": end - first, "job_commit_s": job_commit,
            "rest_s": max(0.0, wall - end - job_commit),
            "task_commit_sum_s": float(metrics.get("task commit time", 0.0)),
            "executor_run_sum_s": sum(float(s["executor_run_s"]) for s in stages),
            "executor_cpu_sum_s": sum(float(s["executor_cpu_s"]) for s in stages)}


# -- the suite -------------------------------------------------------------------------------

def _row_names(args: argparse.Namespace) -> list[str]:
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in ROWS]
    if unknown or not wanted:
        raise SystemExit(f"cloud-writes: unknown rows {unknown}; rows: {', '.join(ROWS)}")
    return wanted


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.cloud_peers.jvmbuild import find_java
    from committer.testing.cloud_sim import start_cloud_sim

    tasks = args.tasks or max(1, args.files // 100)
    expected_files(args.files, tasks, args.partitions)  # the shape, before anything starts
    names = _row_names(args)
    if args.service == "gcs" and not args.gcs_move:
        raise SystemExit("cloud-writes: on gcs every row writes through the GCS connector, "
                         "whose rename needs the objects move API: run with --gcs-move")
    if find_java() is None:
        raise SystemExit("cloud-writes: the rows run Spark: java (JDK 17+) not found")
    rows: dict[str, dict[str, Any]] = {}
    uptime_before = _uptime()
    with start_cloud_sim(service=args.service, latency_ms=args.latency_ms,
                         p99_ms=args.p99_ms if args.latency_ms else 0.0,
                         ops_limit=args.ops_limit, seed=21, gcs_move=args.gcs_move) as sim, \
            tempfile.TemporaryDirectory(prefix="cloud-writes-") as work:
        runs = [(name, "" if k == 1 else f" #{k}")
                for k in range(1, max(1, args.repeats) + 1)
                for name in (names if k % 2 else names[::-1])]  # alternated
        for name, suffix in runs:
            print(f"cloud-writes {args.service} {args.files:,}: {name}{suffix}", flush=True)
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            try:
                row = run_row(sim, args, tasks, name,
                              Path(work) / f"{name}-{uuid.uuid4().hex[:6]}")
            except Exception as e:  # a row that cannot run is reported, not fatal
                row = {"error": f"{type(e).__name__}: {e}"[:3000],
                       "traceback": traceback.format_exc()[-3000:]}
            row["row_s"] = time.perf_counter() - t0
            row["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
            rows[name + suffix] = row
    for key, row in rows.items():
        _, _, k = key.partition(" #")
        engine_wall = rows.get("engine" + (f" #{k}" if k else ""), {}).get("wall_s")
        if row.get("wall_s"):
            row["files_per_s"] = args.files / row["wall_s"]
            if engine_wall:
                row["vs_engine"] = row["wall_s"] / engine_wall
    result = {"service": args.service, "files": args.files, "tasks": tasks,
              "partitions": args.partitions, "rows_per_file": args.rows_per_file,
              "cores": args.cores, "latency_ms": args.latency_ms, "p99_ms": args.p99_ms,
              "ops_limit": args.ops_limit, "gcs_move": args.gcs_move,
              "read_back": args.read_back, "repeats": args.repeats,
              "uptime_before": uptime_before, "uptime_after": _uptime(), "rows": rows,
              "targets_by_pass": _targets(rows, max(1, args.repeats))}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return result


def _targets(rows: dict[str, dict[str, Any]], passes: int) -> list[dict[str, Any]]:
    out = []
    for k in range(1, passes + 1):
        suffix = "" if k == 1 else f" #{k}"
        out.append({name: {"at_least": want, "measured": got, "met": got >= want}
                    for name, want in TARGETS.items()
                    if (got := rows.get(name + suffix, {}).get("vs_engine")) is not None})
    return out


# -- report ----------------------------------------------------------------------------------

def report(result: dict[str, Any]) -> str:
    lines = [f"{result['service']}: {result['files']:,} files ({result['tasks']:,} tasks, "
             f"{result['partitions']} partitions, {result['rows_per_file']} rows a file), "
             f"local[{result['cores']}]; latency median {result['latency_ms']} ms"
             + (f", p99 {result['p99_ms']} ms" if result["latency_ms"] else "")
             + f"; account limit {result['ops_limit']:,.0f} requests/s (0: none)",
             "", f"- load before: `{result['uptime_before']}`",
             f"- load after: `{result['uptime_after']}`", ""]
    table = []
    for name, row in result["rows"].items():
        if row.get("wall_s") is None:
            table.append([name, "FAILED: " + str(row.get("error", "")).splitlines()[0][:200]
                          .replace("|", "/"), *[""] * 10])
            continue
        b = row["breakdown"]
        exact = row.get("destination_exact")
        table.append([
            name, f"{row['wall_s']:.1f}", f"{b['setup_s']:.1f}", f"{b['tasks_s']:.1f}",
            f"{b['task_commit_sum_s']:.1f}", f"{b['job_commit_s']:.1f}", f"{b['rest_s']:.1f}",
            f"{row.get('requests', 0):,}", f"{row.get('cpu_s', 0):.1f}",
            f"{row.get('service_cpu_s', 0):.1f}",
            f"{row['vs_engine']:.2f}" if "vs_engine" in row else "",
            ("yes" if exact else "NO") + ("" if "read_back_exact" not in row else
                                          " (read back)"),
            "{:.2f} / {:.2f}".format(*row.get("load_1m", (0.0, 0.0))),
        ])
    lines.append(markdown_table(
        ["row", "wall s", "before stage s", "write stage s", "task commit s (sum)",
         "job commit s", "rest s", "requests", "CPU s (driver+JVM+engine)",
         "simulator CPU s", "wall / engine's", "destination exact", "load before / after"],
        table))
    lines += ["", "Where each figure comes from: wall, the driver around `write.parquet`; "
              "before stage / write stage, Spark's status store (stage submission to "
              "completion); task commit (summed over tasks) and job commit, Spark's SQL "
              "metrics; CPU, the row's process tree from /proc; requests, the account.", ""]
    lines += [f"- {name}: {row['how']}" for name, row in result["rows"].items() if "how" in row]
    for k, targets in enumerate(result.get("targets_by_pass") or [], 1):
        if targets:
            lines.append(f"- pass {k} (targets are at 100,000 files): " + "; ".join(
                f"{name} {t['at_least']}x: {t['measured']:.2f}x "
                f"{'met' if t['met'] else 'missed'}" for name, t in targets.items()))
    lines += ["", "Requests by operation, and the committer's own stages (its _SUCCESS):", ""]
    for name, row in result["rows"].items():
        if row.get("wall_s") is None:
            continue
        ops = ", ".join(f"{op} {n:,}" for op, n in sorted(row["requests_by_op"].items()))
        stages = ", ".join(f"{s} {v:.1f} s" for s, v in sorted(row["committer_stages"].items()))
        lines.append(f"- {name}: {ops}")
        lines.append(f"  - {stages or 'no stage statistics'}")
        if not row.get("destination_exact"):
            lines.append(f"  - destination NOT exact: missing {row.get('missing')}, extra "
                         f"{row.get('extra')}, temporary left {row.get('temporary_left')}, "
                         f"bytes {row.get('bytes_found')} vs committed "
                         f"{row.get('bytes_committed')}; {row.get('examples')}; read back: "
                         f"{row.get('read_back_bad', 'not done')} bad "
                         f"{row.get('read_back_examples', '')}")
    return "\n".join(lines)
