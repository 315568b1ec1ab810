"""The Hadoop peer: Hadoop's ManifestCommitter committing a job on the simulated service model.

Hadoop cannot talk to the simulated account over HTTP (ABFS wants a real account's endpoints
and authentication), so the service model comes to it: ``jvm/src/cloudpeers/`` holds a Hadoop
``FileSystem`` (``simabfs://``) over a local directory that answers every call the committer
makes as the simulated account answers a request: the same lognormal latency (median and 99th
percentile, ``committer/testing/cloud_sim/latency.py``), the same token bucket shared by the
whole JVM (``throttle.py``: rate, 0.25 s burst), throttled requests answered as ABFS sees
them (a 503, retried after the ABFS client's exponential back-off), and ABFS's own client-side
rate limit on renames (``fs.azure.io.rate.limit``). Its request counts follow ABFS on a
hierarchical-namespace account (one per rename, mkdirs, delete, status; one per listing page
of 5,000; an open's HEAD unless the status is passed; one GET per 4 MiB read); with
``service`` ``blob`` (ABFS on a flat namespace) or ``gcs`` (the GCS connector) a rename is a
copy then a delete, two dependent requests, and a status that finds no object also lists the
prefix (on GCS any directory's too); on ``gcs`` no ABFS rename limit applies. A recursive
delete moves the local tree aside and removes it after the timed commit, so the local disk's
time to unlink many entries is not charged to the service (on the account it is one request).

A Java driver in the same jar prepares the job untimed (job set-up, then for each task its
files on the local disk and Hadoop's own task commit writing its manifest, the model off),
then times ``ManifestCommitter.commitJob`` with the model on. Two configurations: Hadoop's
defaults (``mapreduce.manifest.committer.io.threads`` 32, ``fs.azure.io.rate.limit`` 1,000
on Azure) and tuned (256 threads, no rate cap).

The jar is compiled here on first use with the JDK's javac against pyspark's jars (Hadoop's
client API comes with them), into ``jvm/build/`` (git-ignored), named by a hash of the sources
and the jars compiled against; it is never committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from committer.spark.build import spark_jars_dir
from committer.spark.jarbuild import JavacError, find_javac, find_jdk_tool, javac_jar, locked

__all__ = [
    "DEFAULT_IO_THREADS",
    "DEFAULT_RATE_LIMIT",
    "SERVICES",
    "TUNED_IO_THREADS",
    "HadoopPeerError",
    "expected_files",
    "find_java",
    "jar_path",
    "run_hadoop_peer",
]

JVM_ROOT = Path(__file__).resolve().parent / "jvm"
SOURCE_ROOT = JVM_ROOT / "src"
BUILD_DIR = JVM_ROOT / "build"
MAIN_CLASS = "cloudpeers.Driver"
JAVA_RELEASE = "17"
#: Hadoop's defaults: ManifestCommitter's io threads, ABFS's rename rate limit (per second)
DEFAULT_IO_THREADS = 32
DEFAULT_RATE_LIMIT = 1000
#: the services whose request costs the FileSystem charges (``SimAbfsFileSystem.SERVICES``)
SERVICES = ("adls", "blob", "gcs")
#: tuned: more threads, no client-side cap
TUNED_IO_THREADS = 256
#: the account's bucket capacity, seconds of its rate (the simulator's default)
BURST_S = 0.25
#: a small job (at most a tenth of the job's files) committed first in the same JVM, untimed,
#: so the timed commit runs warm
WARMUP_FILES = 500


class HadoopPeerError(RuntimeError):
    """The Hadoop peer could not run (no JDK, the build failed, the JVM failed)."""


def find_java() -> str | None:
    """``java`` from ``JAVA_HOME``, else on ``PATH``."""
    return find_jdk_tool("java")


def _sources() -> list[Path]:
    files = sorted(SOURCE_ROOT.rglob("*.java"))
    if not files:
        raise HadoopPeerError(f"no Java sources under {SOURCE_ROOT}")
    return files


def _build_key(jars: Path) -> str:
    """The sources, and the Hadoop they are compiled against, name the build."""
    digest = hashlib.sha256(JAVA_RELEASE.encode())
    for path in _sources():
        digest.update(path.relative_to(SOURCE_ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for jar in sorted(p.name for p in jars.glob("hadoop-client-*.jar")):
        digest.update(jar.encode() + b"\0")
    return digest.hexdigest()[:16]


def jar_path() -> Path:
    """The peer's jar, compiled now if this build of the sources has none yet."""
    jars = spark_jars_dir()
    target = BUILD_DIR / f"cloud-peers-{_build_key(jars)}.jar"
    if target.is_file():
        return target
    javac = find_javac()
    if javac is None:
        raise HadoopPeerError("the Hadoop peer compiles its Java sources: a JDK 17+ (javac on "
                              "PATH or in JAVA_HOME) is needed")
    with locked(BUILD_DIR):
        if target.is_file():
            return target
        try:
            javac_jar(javac, _sources(), [jars], JAVA_RELEASE, target, what="the Hadoop peer",
                      manifest=[f"Main-Class: {MAIN_CLASS}"])
        except JavacError as e:
            raise HadoopPeerError(str(e)) from None
        for old in BUILD_DIR.glob("cloud-peers-*.jar"):
            if old != target:
                old.unlink(missing_ok=True)
    return target


def expected_files(files: int, tasks: int, partitions: int) -> set[str]:
    """The destination's files (relative paths) once the job is committed: the driver names
    them as the cloud-scale benchmark does, ``p=<k>/part-<task>-<i>.parquet``."""
    out: set[str] = set()
    first = 0
    for t in range(tasks):
        count = files // tasks + (1 if t < files % tasks else 0)
        out.update(f"p={(first + i) % partitions:04d}/part-{t:05d}-{i:05d}.parquet"
                   for i in range(count))
        first += count
    return out


def _check_destination(table: Path, files: int, tasks: int, partitions: int
                       ) -> dict[str, object]:
    """Every file renamed into place and nothing else left, _SUCCESS written and saying so."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(table):
        rel = os.path.relpath(dirpath, table)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d != "_temporary"]
            continue
        found.update(f"{rel}/{name}".replace(os.sep, "/") for name in filenames)
    expected = expected_files(files, tasks, partitions)
    success: object = None
    marker = table / "_SUCCESS"
    if marker.is_file():
        try:
            success = json.loads(marker.read_bytes()).get("success")
        except ValueError:
            success = "unreadable"
    missing = len(expected - found)
    extra = len(found - expected)
    leftover = (table / "_temporary").exists()
    return {"missing": missing, "extra": extra, "temporary_left": leftover,
            "success_marker": success,
            "destination_exact": missing == 0 and extra == 0 and not leftover
            and success is True}


def _stages(timeline: object) -> list[dict[str, object]]:
    """The driver's stage timeline as [{name, start_s, seconds}] (the cloud-peers report's
    form); a stage left open (the outer commit) ends with the commit."""
    out: list[dict[str, object]] = []
    if not isinstance(timeline, list):
        return out
    for item in timeline:
        if isinstance(item, dict) and item.get("end_s") is not None:
            start = float(item["start_s"])
            out.append({"name": str(item["stage"]), "start_s": start,
                        "seconds": float(item["end_s"]) - start})
    return out


def run_hadoop_peer(files: int, tasks: int, partitions: int, latency_ms: float, p99_ms: float,
                    ops_limit: int, tuned: bool, workdir: Path, *, service: str = "adls"
                    ) -> dict[str, object]:
    """Runs one job commit of Hadoop's ManifestCommitter under the service model; returns the
    driver's JSON (``wall_s``, ``requests`` served, ``throttled``, ``process_cpu_s`` of the
    commit, ``stages``, Hadoop's own stage durations and counters) and the destination's
    check (``destination_exact``). ``ops_limit`` 0: no account limit. The job's files are
    removed afterwards; ``workdir`` must be on a local disk with room for them. ``service``
    chooses the request costs (see the module's text); ``fs.azure.io.rate.limit`` applies on
    the Azure ones only (the GCS connector has no such limit)."""
    if service not in SERVICES:
        raise ValueError(f"the Hadoop peer's service must be one of {', '.join(SERVICES)}, "
                         f"got {service!r}")
    if files < 1 or tasks < 1 or tasks > files or partitions < 1:
        raise ValueError(f"the Hadoop peer needs files >= tasks >= 1 and partitions >= 1 "
                         f"(files {files}, tasks {tasks}, partitions {partitions})")
    if ops_limit < 0 or latency_ms < 0 or p99_ms < latency_ms:
        raise ValueError(f"the Hadoop peer needs ops_limit >= 0 and p99 >= median >= 0 "
                         f"(ops_limit {ops_limit}, latency {latency_ms} ms, p99 {p99_ms} ms)")
    java = find_java()
    if java is None:
        raise HadoopPeerError("the Hadoop peer runs a JVM: java (JDK 17+) not found on PATH "
                              "or in JAVA_HOME")
    jar = jar_path()
    workdir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="hadoop-tuned-" if tuned else "hadoop-defaults-",
                                 dir=workdir))
    out_file = root / "result.json"
    rate_limit = 0 if tuned or service == "gcs" else DEFAULT_RATE_LIMIT
    cmd = [java, "-cp", os.pathsep.join([str(jar), str(spark_jars_dir() / "*")]), MAIN_CLASS,
           "--root", str(root / "account"), "--files", str(files), "--tasks", str(tasks),
           "--partitions", str(partitions), "--latency-ms", repr(float(latency_ms)),
           "--p99-ms", repr(float(p99_ms)), "--ops-limit", str(ops_limit),
           "--burst-s", repr(BURST_S),
           "--threads", str(TUNED_IO_THREADS if tuned else DEFAULT_IO_THREADS),
           "--rate-limit", str(rate_limit), "--service", service,
           "--warmup-files", str(min(WARMUP_FILES, files // 10)), "--out", str(out_file)]
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        jvm_s = time.perf_counter() - t0
        if proc.returncode != 0 or not out_file.is_file():
            raise HadoopPeerError(f"the Hadoop peer's JVM failed (exit {proc.returncode}):\n"
                                  f"{proc.stderr[-4000:]}")
        result: dict[str, object] = json.loads(out_file.read_text(encoding="utf-8"))
        result.update(_check_destination(root / "account" / "table", files, tasks, partitions))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["tuned"] = tuned
    result["jvm_s"] = jvm_s
    result["stages"] = _stages(result.get("stage_timeline"))
    result["configuration"] = (
        f"io.threads {TUNED_IO_THREADS}, no rate limit" if tuned else
        f"io.threads {DEFAULT_IO_THREADS}, " + (f"fs.azure.io.rate.limit {rate_limit}/s"
                                                if rate_limit else "no rate limit (GCS)"))
    return result
