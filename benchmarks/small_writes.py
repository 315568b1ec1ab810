"""Tiny writes: the fixed cost per job of each engine path, against Spark's default committer.

    python -m benchmarks small-writes [--writes N] [--warmup W] [--rounds R] [--writers T]
                                      [--no-connect]

1. **Sequential**: each mode runs in a fresh PySpark driver — ``default`` (Spark's own protocol,
   no jar), ``configure`` (this committer set up by ``committer.spark.configure``) and ``conf``
   (this committer from the jar and ``commitProtocolClass`` alone, as ``--conf`` lines give it:
   the engine runs the driver's PySpark interpreter) — doing W warm-up appends and then N timed
   appends of 100 rows in 2 tasks. R rounds, the order of the modes rotated each round, so a
   slow spell of the shared machine does not land on one mode.
2. **Concurrent**: T writer threads in one driver (``default`` against ``configure``), and a
   Spark Connect server with T client sessions (``default`` against this committer). Same
   rotation.
3. **Where our fixed cost goes**: Spark's own ``task commit time`` and ``job commit time``
   metrics of every sequential write, and a replay of a tiny job's requests through the engine
   in plain Python with its parts timed (request to job, setup, each commit stage, journal
   saves, thread starts, directory removals).

Every figure is a median with its spread; the load average is recorded with each driver.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, markdown_table

NAME = "small-writes"
TITLE = ("Small writes: fixed cost per job (Spark's default committer; this one set up by "
         "configure() and by --conf alone)")
MODES = ("default", "configure", "conf")
DEFAULT_PROTOCOL = "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
PROTOCOL_KEY = "spark.sql.sources.commitProtocolClass"
ROWS, TASKS = 100, 2


def add_arguments(parser: Any) -> None:
    parser.add_argument("--writes", type=int, default=15, help="timed tiny writes per driver")
    parser.add_argument("--warmup", type=int, default=3, help="untimed writes first")
    parser.add_argument("--rounds", type=int, default=3, help="fresh drivers per mode")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writers")
    parser.add_argument("--concurrent-writes", type=int, default=6,
                        help="timed writes per concurrent writer")
    parser.add_argument("--no-connect", action="store_true",
                        help="skip the Spark Connect server part")


# -- statistics --------------------------------------------------------------------------------


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {"n": len(ordered), "median": statistics.median(ordered), "p25": q[0], "p75": q[2],
            "min": ordered[0], "max": ordered[-1]}


def _in_threads(writer: Callable[[int], None], writers: int,
                errors: list[BaseException]) -> None:
    """Runs ``writer(0..writers-1)`` on as many threads; raises the first error they recorded."""
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _rotated(items: Sequence[str], k: int) -> list[str]:
    k %= len(items)
    return list(items[k:]) + list(items[:k])


# -- one fresh driver (run as: python -m benchmarks.small_writes --driver PARAMS) --------------

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _metric_seconds(text: str) -> float:
    """Spark's rendering of a timing metric: "12 ms", or "total (min, ...)\\n5 ms (...)"."""
    line = text.split("\n")[1] if "\n" in text else text
    number, unit = line.split(" (")[0].replace(",", "").split(" ")[:2]
    return float(number) * _UNITS[unit]


def _last_write_metrics(spark: Any) -> dict[str, float]:
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    last = executions.apply(executions.size() - 1)
    values = store.executionMetrics(last.executionId())
    metrics = last.metrics()
    out: dict[str, float] = {}
    for i in range(metrics.size()):
        metric = metrics.apply(i)
        name = str(metric.name())
        value = values.get(metric.accumulatorId())
        if name in ("job commit time", "task commit time") and value.isDefined():
            out[name.replace(" ", "_")] = _metric_seconds(str(value.get()))
    return out


def _session(mode: str, work: Path) -> Any:
    from pyspark.sql import SparkSession

    from committer.spark import PROTOCOL_CLASS, configure, jar_path

    builder = (
        SparkSession.builder.master("local[2]").appName(f"small-writes-{mode}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
    )
    if mode == "configure":
        builder = configure(builder)
    elif mode == "conf":
        # What --jars, --driver-class-path and one --conf give: the engine runs the driver's
        # PySpark interpreter, found through $PYSPARK_DRIVER_PYTHON.
        jar = str(jar_path())
        builder = builder.config("spark.jars", jar).config("spark.driver.extraClassPath", jar) \
            .config(PROTOCOL_KEY, PROTOCOL_CLASS)
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _driver(params: dict[str, Any]) -> dict[str, Any]:
    mode, work = params["mode"], Path(params["work"])
    writers, writes, warmup = params["writers"], params["writes"], params["warmup"]
    load_before = os.getloadavg()
    spark = _session(mode, work)
    df = spark.range(0, ROWS, numPartitions=TASKS)
    out: dict[str, Any] = {"mode": mode, "writers": writers}
    try:
        for w in range(writers):
            for _ in range(warmup):
                df.write.mode("append").parquet(str(work / f"w{w}"))
        times: list[float] = []
        metrics: list[dict[str, float]] = []
        lock = threading.Lock()
        errors: list[BaseException] = []
        barrier = threading.Barrier(writers)

        def writer(w: int) -> None:
            try:
                barrier.wait()
                for _ in range(writes):
                    t0 = time.perf_counter()
                    df.write.mode("append").parquet(str(work / f"w{w}"))
                    elapsed = time.perf_counter() - t0
                    m = _last_write_metrics(spark) if writers == 1 else {}
                    with lock:
                        times.append(elapsed)
                        metrics.append(m)
            except BaseException as exc:
                errors.append(exc)

        _in_threads(writer, writers, errors)
        out["times"] = times
        out["metrics"] = metrics
        out["rows_read"] = [spark.read.parquet(str(work / f"w{w}")).count()
                            for w in range(writers)]
    finally:
        spark.stop()
    out["load_average"] = [load_before, os.getloadavg()]
    return out


def _run_driver(params: dict[str, Any]) -> dict[str, Any]:
    return _run_sub("--driver", params)


# -- Spark Connect ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def connect_server(work: Path) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 whose writes go through this committer (its engine:
    the driver JVM's engine process; clients may switch to Spark's protocol per session)."""
    import pyspark

    from committer.spark import jar_path, spark_conf

    spark_home = os.path.dirname(pyspark.__file__)
    jar = str(jar_path())
    port = _free_port()
    conf = dict(spark_conf(), **{
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.driver.extraClassPath": jar,
        "spark.jars": jar,
    })
    cmd = [os.path.join(spark_home, "bin", "spark-submit"), "--master", "local[2]",
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("spark-internal")
    log_path = work / "connect-server.log"
    env = dict(os.environ, SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable)
    with open(log_path, "wb") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while b"Spark Connect server started" not in log_path.read_bytes():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Spark Connect server did not start:\n"
                                   + log_path.read_text(errors="replace")[-4000:])
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _connect_client(params: dict[str, Any]) -> dict[str, Any]:
    """T client sessions of one Connect server, one writer thread each."""
    from pyspark.sql import SparkSession

    mode, work, url = params["mode"], Path(params["work"]), params["url"]
    writers, writes, warmup = params["writers"], params["writes"], params["warmup"]
    load_before = os.getloadavg()
    sessions = [SparkSession.builder.remote(url).create() for _ in range(writers)]
    for s in sessions:
        if mode == "default":
            s.conf.set(PROTOCOL_KEY, DEFAULT_PROTOCOL)
    times: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(writers)

    def writer(w: int) -> None:
        try:
            df = sessions[w].range(0, ROWS, numPartitions=TASKS)
            dest = str(work / f"{mode}-c{w}")
            for _ in range(warmup):
                df.write.mode("append").parquet(dest)
            barrier.wait()
            for _ in range(writes):
                t0 = time.perf_counter()
                df.write.mode("append").parquet(dest)
                with lock:
                    times.append(time.perf_counter() - t0)
        except BaseException as exc:
            errors.append(exc)

    _in_threads(writer, writers, errors)
    rows_read = [sessions[0].read.parquet(str(work / f"{mode}-c{w}")).count()
                 for w in range(writers)]
    for s in sessions:
        s.stop()
    return {"mode": mode, "writers": writers, "times": times, "rows_read": rows_read,
            "load_average": [load_before, os.getloadavg()]}


# -- the engine's parts, replayed in plain Python ----------------------------------------------


class _Meter:
    """Accumulates time and calls of wrapped functions for the job being measured."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
                self.calls[name] = self.calls.get(name, 0) + 1

        setattr(owner, attr, timed)

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        seconds, calls = self.seconds, self.calls
        self.seconds, self.calls = {}, {}
        return seconds, calls


def _engine_parts(params: dict[str, Any]) -> dict[str, Any]:
    """A tiny job's setupJob and commitJob requests through ``engine.handle``, parts timed by
    wrapping the functions that do them (in this process only)."""
    from committer import TaskAttemptCommitter, task_ids
    from committer.job import committer as commit
    from committer.job.durability import journal, transaction
    from committer.spark import engine
    from committer.store.local import LocalStore

    meter = _Meter()
    meter.wrap(engine, "_job", "request to job (config, store)")
    meter.wrap(commit.JobCommitter, "setup", "setup")
    meter.wrap(commit, "load_manifests", "load manifests")
    meter.wrap(commit, "create_directories", "create directories")
    meter.wrap(commit, "rename_files", "rename files")
    meter.wrap(commit, "save_success_marker", "_SUCCESS")
    meter.wrap(transaction, "save_journal", "journal saves")
    meter.wrap(journal, "save_journal", "journal saves")
    meter.wrap(transaction, "advance", "journal advances")
    meter.wrap(commit, "cleanup_job", "cleanup")
    meter.wrap(threading.Thread, "start", "thread starts")
    meter.wrap(LocalStore, "rmdir_run", "rmdir")
    meter.wrap(LocalStore, "delete_tree", "delete tree")
    meter.wrap(commit.JobCommitter, "commit", "commit (total)")

    work = Path(params["work"])
    jobs = params["jobs"]
    rows: list[dict[str, Any]] = []
    for i in range(jobs + params["warmup"]):
        dest = work / f"dest{i % 3}"
        job_id = f"job-{i}"

        def request(op: str, **extra: Any) -> dict[str, Any]:
            return {"operation": op, "jobId": job_id, "jobAttempt": 0,  # noqa: B023
                    "destinationUri": "file:" + str(dest),  # noqa: B023
                    "dynamicPartitionOverwrite": False, "conf": {}, **extra}

        meter.take()
        t0 = time.perf_counter()
        assert engine.handle(request("setupJob"))["ok"]
        setup_total = time.perf_counter() - t0
        setup_parts, _ = meter.take()
        tasks = []
        for t in range(TASKS):
            task, attempt = task_ids(job_id, t)
            ta = TaskAttemptCommitter(str(dest), job_id, task, attempt)
            ta.setup()
            with ta.open_output(f"part-{t:05d}-{job_id}.parquet") as f:
                f.write(b"x" * 700)
            ta.commit()
            tasks.append({"taskId": task, "taskAttemptId": attempt})
        meter.take()
        t0 = time.perf_counter()
        response = engine.handle(request("commitJob", committedTasks=tasks))
        commit_total = time.perf_counter() - t0
        assert response["ok"], response
        seconds, calls = meter.take()
        if i >= params["warmup"]:
            rows.append({"setupJob": setup_total, "commitJob": commit_total,
                         "setup_parts": setup_parts, "parts": seconds, "calls": calls})
    return {"jobs": rows}


# -- the suite ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from committer.spark import jar_path

    jar_path()  # built once, before any timing
    result: dict[str, Any] = {
        "params": {"writes": args.writes, "warmup": args.warmup, "rounds": args.rounds,
                   "writers": args.writers, "concurrent_writes": args.concurrent_writes,
                   "rows": ROWS, "tasks": TASKS},
        "sequential": {m: [] for m in MODES},
        "threads": {m: [] for m in ("default", "configure")},
        "connect": {m: [] for m in ("default", "ours")},
    }
    with tempfile.TemporaryDirectory(prefix="small-writes-") as tmp:
        base = Path(tmp)
        for r in range(args.rounds):
            for mode in _rotated(MODES, r):
                work = base / f"seq-{mode}-{r}"
                print(f"  sequential round {r + 1}/{args.rounds}: {mode}", flush=True)
                result["sequential"][mode].append(_run_driver({
                    "mode": mode, "work": str(work), "writers": 1, "writes": args.writes,
                    "warmup": args.warmup}))
                shutil.rmtree(work, ignore_errors=True)
        for r in range(args.rounds):
            for mode in _rotated(("default", "configure"), r):
                work = base / f"thr-{mode}-{r}"
                print(f"  {args.writers} threads round {r + 1}/{args.rounds}: {mode}",
                      flush=True)
                result["threads"][mode].append(_run_driver({
                    "mode": mode, "work": str(work), "writers": args.writers,
                    "writes": args.concurrent_writes, "warmup": 1}))
                shutil.rmtree(work, ignore_errors=True)
        if not args.no_connect:
            work = base / "connect"
            work.mkdir()
            with connect_server(work) as url:
                for r in range(args.rounds):
                    for mode in _rotated(("default", "ours"), r):
                        print(f"  Connect, {args.writers} clients, round {r + 1}/{args.rounds}:"
                              f" {mode}", flush=True)
                        result["connect"][mode].append(_run_sub("--connect-client", {
                            "mode": mode, "work": str(work / f"r{r}"), "url": url,
                            "writers": args.writers, "writes": args.concurrent_writes,
                            "warmup": 1}))
        print("  engine parts (plain Python replay)", flush=True)
        result["engine_parts"] = _run_sub("--engine-parts", {
            "work": str(base / "parts"), "jobs": 4 * args.writes, "warmup": args.warmup})
    _check_rows(result, args)
    result["summary"] = summarize(result)
    return result


def _run_sub(flag: str, params: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.small_writes", flag,
                           json.dumps(params)], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{flag} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def _check_rows(result: dict[str, Any], args: argparse.Namespace) -> None:
    """Every write committed: each destination reads back all its rows."""
    for part in ("sequential", "threads", "connect"):
        for mode, runs in result[part].items():
            for run_ in runs:
                per_dest = (args.warmup + args.writes) if part == "sequential" else \
                    1 + args.concurrent_writes
                if any(n != per_dest * ROWS for n in run_["rows_read"]):
                    raise RuntimeError(f"{part} {mode}: rows read back {run_['rows_read']}, "
                                       f"expected {per_dest * ROWS} per destination")


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in ("sequential", "threads", "connect"):
        section: dict[str, Any] = {}
        for mode, runs in result[part].items():
            if not runs:
                continue
            times = [t for r in runs for t in r["times"]]
            section[mode] = {"all": _stats(times),
                             "driver_medians": [statistics.median(r["times"]) for r in runs],
                             "load_average": [r["load_average"][0][0] for r in runs]}
        if "default" in section:
            base = section["default"]["all"]["median"]
            for entry in section.values():
                entry["ratio"] = entry["all"]["median"] / base
        out[part] = section
    breakdown: dict[str, Any] = {}
    for mode, runs in result["sequential"].items():
        metrics = [m for r in runs for m in r["metrics"]]
        breakdown[mode] = {key: _stats([m[key] for m in metrics if key in m])
                           for key in ("job_commit_time", "task_commit_time")}
    out["breakdown"] = breakdown
    jobs = result["engine_parts"]["jobs"]
    names = sorted({n for j in jobs for n in j["parts"]})
    out["engine_parts"] = {
        "setupJob": _stats([j["setupJob"] for j in jobs]),
        "commitJob": _stats([j["commitJob"] for j in jobs]),
        "setup_parts": {n: _stats([j["setup_parts"].get(n, 0.0) for j in jobs])
                        for n in sorted({n for j in jobs for n in j["setup_parts"]})},
        "parts": {n: _stats([j["parts"].get(n, 0.0) for j in jobs]) for n in names},
        "calls": {n: statistics.median([j["calls"].get(n, 0) for j in jobs]) for n in names},
    }
    return out


def _ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def report(result: dict[str, Any]) -> str:
    p = result["params"]
    s = result["summary"]
    lines = [
        f"Tiny appends ({p['rows']} rows, {p['tasks']} tasks, parquet, local disk), "
        f"{p['warmup']} warm-up writes then {p['writes']} timed per fresh driver, "
        f"{p['rounds']} drivers per mode, order rotated. Times per write in seconds; spread is "
        "the middle half (p25-p75) and the extremes; load = 1-minute load average when each "
        "driver started.", "",
    ]

    def table(section: dict[str, Any]) -> str:
        rows = []
        for mode, v in section.items():
            a = v["all"]
            rows.append([mode, a["n"], f"{a['median']:.3f}", f"{a['p25']:.3f}-{a['p75']:.3f}",
                         f"{a['min']:.3f}-{a['max']:.3f}",
                         ", ".join(f"{x:.3f}" for x in v["driver_medians"]),
                         f"{v.get('ratio', float('nan')):.2f}x",
                         ", ".join(f"{x:.1f}" for x in v["load_average"])])
        return markdown_table(["mode", "writes", "median", "p25-p75", "min-max",
                               "driver medians", "vs default", "load"], rows)

    lines += ["### One writer", "", table(s["sequential"]), ""]
    lines += [f"### {p['writers']} writer threads in one driver ({p['concurrent_writes']} "
              "timed writes each)", "", table(s["threads"]), ""]
    if s["connect"]:
        lines += [f"### Spark Connect server, {p['writers']} client sessions writing at once "
                  f"({p['concurrent_writes']} timed writes each)", "",
                  table(s["connect"]), ""]
    lines += ["### Where the time goes (one writer; medians in ms)", ""]
    rows = []
    for mode, b in s["breakdown"].items():
        rows.append([mode, _ms(b["task_commit_time"].get("median", 0.0)),
                     _ms(b["job_commit_time"].get("median", 0.0))])
    lines += [markdown_table(["mode", "task commit (Spark metric, both tasks)",
                              "job commit (Spark metric)"], rows), ""]
    e = s["engine_parts"]
    lines += [f"Engine replay in plain Python (a 2-file job, {e['commitJob']['n']} jobs): "
              f"setupJob {_ms(e['setupJob']['median'])} ms, commitJob "
              f"{_ms(e['commitJob']['median'])} ms (p25-p75 {_ms(e['commitJob']['p25'])}-"
              f"{_ms(e['commitJob']['p75'])}). Parts of commitJob (nested parts overlap: "
              "journal saves, thread starts and directory removals happen inside stages):", ""]
    rows = [[name, _ms(v["median"]), f"{e['calls'][name]:g}"] for name, v in e["parts"].items()]
    lines += [markdown_table(["part", "median ms per job", "calls per job"], rows), ""]
    rows = [[name, _ms(v["median"])] for name, v in e["setup_parts"].items()]
    lines += ["Parts of setupJob:", "", markdown_table(["part", "median ms per job"], rows)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    entry = {"--driver": _driver, "--connect-client": _connect_client,
             "--engine-parts": _engine_parts}
    if len(args) == 2 and args[0] in entry:
        params = json.loads(args[1])
        Path(params["work"]).mkdir(parents=True, exist_ok=True)
        print(json.dumps(entry[args[0]](params)), flush=True)
        return 0
    from benchmarks.__main__ import main as suite_main

    return suite_main([NAME, *args])


if __name__ == "__main__":
    sys.exit(main())

