"""The Hadoop peer on Hadoop's real connectors: Spark's binding for Hadoop's committers
(``PathOutputCommitProtocol``, spark-hadoop-cloud) committing a job with Hadoop's
ManifestCommitter through hadoop-azure's ABFS (Data Lake, or flat Blob through its Blob
client) or Google's GCS connector, over HTTP, against the simulated account the engine's rows
use: the same latency model, account rate and throttling, the same request counts.

The connectors are pointed at the simulator with the keys the Spark suite uses too
(``committer/testing/connector_keys.py``, whose docstring has the quirks: ABFS's endpoint
override and the JDK's HTTP client over plain http, the GCS connector's root URL and Hadoop
3.5's ``fs.gs.*`` defaults). The
committer is the one Hadoop's ``mapred-default.xml`` binds to the scheme
(``mapreduce.outputcommitter.factory.scheme.abfs``: ``AzureManifestCommitterFactory``,
Hadoop's ManifestCommitter with ABFS's rename recovery and its ``fs.azure.io.rate.limit``;
``...scheme.gs``: ``ManifestCommitterFactory``).

One JVM per row (``jvm/src/cloudpeers/ConnectorDriver.java``): a small job written through
the connector and committed first, untimed (class loading, JIT, connections warm, as in a
driver that has written before), then ``setupJob`` of the timed job; this process then puts
the job into the account as Hadoop's task commits leave it (its layout, ``TaskManifest/1``
with the etag each connector's task commit records: ABFS on Data Lake the listing's,
unquoted; ABFS's Blob client the quoted ETag; the GCS connector none), content-less sources
named as ``cloud_scale/job.py`` names them, and resets the account's statistics; then the JVM
times ``commitJob`` with its process CPU (``getProcessCpuTime``, every thread) and garbage
collection, and reads ``_SUCCESS`` back.

Two configurations: Hadoop's defaults (nothing set: ``mapreduce.manifest.committer.io.threads``
32, ``fs.azure.io.rate.limit`` 1,000) and tuned (256 threads, the rate limit off). Both run
with the JDK's HTTP keep-alive cache (``http.maxConnections``) at the thread count plus some:
the JDK client's default of 5 idle connections would make the JVM open a connection for most
requests, a cost the connectors' own pools do not have on a real account.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from benchmarks.cloud_peers.jvmbuild import HadoopPeerError, find_java, jar_path
from benchmarks.common import log_tail
from committer.spark.build import spark_jars_dir
from committer.testing import jvm_artifacts
from committer.testing.cloud_sim import CloudSim
from committer.testing.connector_keys import CONNECTOR_SERVICES
from committer.testing.connector_keys import connector_keys as shared_connector_keys

__all__ = [
    "CONNECTOR_SERVICES",
    "DEFAULT_IO_THREADS",
    "TUNED_IO_THREADS",
    "ConnectorJob",
    "classpath",
    "committer_keys",
    "configuration_text",
    "connector_jars",
    "connector_keys",
    "http_connections",
    "run_connector_peer",
]

MAIN_CLASS = "cloudpeers.ConnectorDriver"
DEFAULT_IO_THREADS = 32  # Hadoop's mapreduce.manifest.committer.io.threads
TUNED_IO_THREADS = 256
#: the warm-up job: files written through the connector, tasks
WARMUP_FILES = 200
WARMUP_TASKS = 4
FILE_SIZE = 1024  # as cloud_scale/job.py
BUCKET = "data"
TABLE = "table"
_TASKS_PER_CALL = 10  # tasks whose objects go to the simulator in one control request
#: what a row may take at most (a 100,000-file commit at Hadoop's defaults takes minutes)
_TIMEOUT_S = 3600.0


def connector_keys(sim: CloudSim, service: str) -> tuple[str, dict[str, str]]:
    """The container's URI as the connector names it, and the Hadoop keys pointing the
    connector at ``sim`` (``committer/testing/connector_keys.py``, the Spark suite's too)."""
    return shared_connector_keys(sim, service, BUCKET)


def committer_keys(service: str, tuned: bool) -> tuple[int, dict[str, str]]:
    """The Hadoop rows' configurations: the committer's io threads, and the keys that set
    them (none for Hadoop's defaults; tuned: 256 threads, ABFS's rename rate limit off)."""
    if not tuned:
        return DEFAULT_IO_THREADS, {}
    keys = {"mapreduce.manifest.committer.io.threads": str(TUNED_IO_THREADS)}
    if service != "gcs":
        keys["fs.azure.io.rate.limit"] = "0"  # off
    return TUNED_IO_THREADS, keys


def configuration_text(service: str, tuned: bool) -> str:
    """A Hadoop row's configuration as the report names it."""
    threads = TUNED_IO_THREADS if tuned else DEFAULT_IO_THREADS
    return (f"io.threads {threads}"
            + ("" if service == "gcs" else
               ", fs.azure.io.rate.limit " + ("off" if tuned else "1,000/s")))


def http_connections(threads: int) -> str:
    """The JVM option giving the JDK's HTTP client a keep-alive cache for ``threads`` (its
    default of 5 idle connections would make the JVM open a connection for most requests)."""
    return f"-Dhttp.maxConnections={threads + 16}"


def connector_jars() -> list[str]:
    """The connectors' and spark-hadoop-cloud's jars (fetched by the set-up; checked here)."""
    jars = jvm_artifacts.check_all(jvm_artifacts.line_of(_pyspark_version()),
                                   [jvm_artifacts.AZURE, jvm_artifacts.GCS,
                                    jvm_artifacts.CLOUD_COMMITTER])
    return [str(jars[r]) for r in sorted(jars)]


def classpath() -> str:
    """The connector driver's class path: its jar, pyspark's jars, :func:`connector_jars`."""
    return os.pathsep.join([str(jar_path()), str(spark_jars_dir() / "*"), *connector_jars()])


def _pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


class ConnectorJob:
    """A job in Hadoop's layout, put into the account as its task commits would leave it."""

    def __init__(self, service: str, root: str, attempt_dir: str, job_id: str, files: int,
                 tasks: int, partitions: int) -> None:
        self.service = service
        self.root = root
        self.attempt_dir = attempt_dir
        self.job_id = job_id
        self.files = files
        self.tasks = tasks
        self.partitions = partitions
        self.dest = f"{root}/{TABLE}"
        #: destination key -> (size, identity), as cloud_scale's SimJob.expected
        self.expected: dict[str, tuple[int, str]] = {}
        #: [source key, destination key]
        self.pairs: list[list[str]] = []

    def key(self, uri: str) -> str:
        return uri.removeprefix(self.root + "/")

    def _etag(self, answer: dict[str, Any]) -> str | None:
        # what each connector's task commit records (seen in the warm-up's manifests)
        if self.service == "adls":
            return str(answer["etag"]).strip('"')
        if self.service == "blob":
            return '"' + str(answer["etag"]).strip('"') + '"'
        return None

    def put(self, sim: CloudSim) -> None:
        """The sources (content-less) and one ``TaskManifest/1`` per task."""
        jt = "20261128" + uuid.uuid4().hex[:6]  # Hadoop's job tracker id: any word
        per_task = [self.files // self.tasks + (1 if t < self.files % self.tasks else 0)
                    for t in range(self.tasks)]
        first = 0
        for start in range(0, self.tasks, _TASKS_PER_CALL):
            group = range(start, min(start + _TASKS_PER_CALL, self.tasks))
            sources: list[tuple[int, str, str]] = []
            for t in group:
                attempt_dir = f"{self.attempt_dir}/tasks/attempt_{jt}_0000_m_{t:06d}_0"
                for i in range(per_task[t]):
                    rel = f"p={(first + i) % self.partitions:04d}/part-{t:05d}-{i:05d}.parquet"
                    sources.append((t, f"{attempt_dir}/{rel}", f"{self.dest}/{rel}"))
                first += per_task[t]
            answers = sim.populate({"bucket": BUCKET, "key": self.key(s), "size": FILE_SIZE}
                                   for _, s, _ in sources)
            entries: dict[int, list[dict[str, Any]]] = {t: [] for t in group}
            for (t, src, dst), answer in zip(sources, answers, strict=True):
                entry: dict[str, Any] = {"s": src, "d": dst, "z": FILE_SIZE}
                etag = self._etag(answer)
                if etag is not None:
                    entry["e"] = etag
                entries[t].append(entry)
                self.expected[self.key(dst)] = (FILE_SIZE, str(answer.get("etag")))
                self.pairs.append([self.key(src), self.key(dst)])
            sim.populate(self._manifest(jt, t, entries[t]) for t in group)

    def _manifest(self, jt: str, t: int, files: list[dict[str, Any]]) -> dict[str, Any]:
        # Hadoop's TaskManifest/1 as its task commit saves it (hadoop-formats.md)
        dirs = sorted({f["d"].rsplit("/", 1)[0] for f in files})
        doc = {
            "type": "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files."
                    "TaskManifest/1",
            "version": 1, "jobId": self.job_id, "jobAttemptNumber": 0,
            "taskID": f"task_{jt}_0000_m_{t:06d}",
            "taskAttemptID": f"attempt_{jt}_0000_m_{t:06d}_0",
            "taskAttemptDir": f"{self.attempt_dir}/tasks/attempt_{jt}_0000_m_{t:06d}_0",
            "files": files,
            "directories": [{"d": d, "t": 1, "l": 1} for d in dirs],
            "iostatistics": {"counters": {}, "gauges": {}, "minimums": {}, "maximums": {},
                             "meanstatistics": {}},
            "extraData": {},
        }
        key = self.key(f"{self.attempt_dir}/manifests/task_{jt}_0000_m_{t:06d}-manifest.json")
        return {"bucket": BUCKET, "key": key,
                "data_b64": base64.b64encode(json.dumps(doc).encode()).decode("ascii")}


def _lines(stream: IO[str]) -> Iterator[dict[str, Any]]:
    for line in stream:
        if line.startswith("{"):
            yield json.loads(line)


def _stages(success: dict[str, Any], wall_s: float) -> list[dict[str, Any]]:
    """Hadoop's job-commit stages from its ``_SUCCESS`` statistics, one after another (they
    run in sequence), as [{name, start_s, seconds}]; the marker's save and the cleanup come
    after the statistics are taken, so they and Spark's protocol around the committer are
    the rest of the wall."""
    means = (success.get("iostatistics") or {}).get("meanstatistics") or {}
    out: list[dict[str, Any]] = []
    t = 0.0
    for name in ("job_stage_load_manifests", "job_stage_create_target_dirs",
                 "job_stage_rename_files"):
        took = float((means.get(f"{name}.mean") or {}).get("sum", 0)) / 1000.0
        out.append({"name": name.removeprefix("job_stage_"), "start_s": t, "seconds": took})
        t += took
    out.append({"name": "success_marker_cleanup_protocol", "start_s": t,
                "seconds": max(0.0, wall_s - t)})
    return out


def run_connector_peer(sim: CloudSim, service: str, files: int, tasks: int, partitions: int,
                       tuned: bool, workdir: Path) -> dict[str, Any]:
    """One job commit by Spark's binding and Hadoop's ManifestCommitter through the real
    connector of ``service`` against ``sim`` (emptied first). Returns the JVM's figures
    (``wall_s``, ``cpu_s``: its process CPU over ``commitJob``, ``gc_s``, ``stages``,
    ``success``), the account's (``requests``, ``throttled``, ``requests_by_op``,
    ``service_cpu_s``) and the :class:`ConnectorJob` as ``job`` for the caller's check."""
    if service not in CONNECTOR_SERVICES:
        raise ValueError(f"no connector row for {service!r}")
    java = find_java()
    if java is None:
        raise HadoopPeerError("the Hadoop rows run a JVM: java (JDK 17+) not found")
    sim.reset()
    sim.populate([{"bucket": BUCKET, "key": "README", "data_b64": ""}])
    root, keys = connector_keys(sim, service)
    threads, tuning = committer_keys(service, tuned)
    keys.update(tuning)
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "conf.json"
    conf.write_text(json.dumps(keys), encoding="utf-8")
    job_id = str(uuid.uuid4())
    log = workdir / "jvm.log"
    cmd = [java, http_connections(threads), "-cp", classpath(), MAIN_CLASS,
           "--dest", f"{root}/{TABLE}", "--job-id", job_id, "--conf", str(conf),
           "--warmup-dest", f"{root}/warmup", "--warmup-tasks", str(WARMUP_TASKS),
           "--warmup-files", str(min(WARMUP_FILES, files))]
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    killer = threading.Timer(_TIMEOUT_S, proc.kill)
    killer.start()
    try:
        answers = _lines(proc.stdout)
        warm = next(answers, None)
        ready = next(answers, None)
        if warm is None or ready is None or not ready.get("ready"):
            raise HadoopPeerError(f"the connector driver stopped before the commit:\n"
                                  f"{log_tail(log)}")
        job = ConnectorJob(service, root, str(ready["attempt_dir"]), job_id, files, tasks,
                           partitions)
        job.put(sim)
        sim.reset_stats()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        result = next(answers, None)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # it has answered: its end is not timed
            proc.kill()
            code = proc.wait()
        stats = sim.stats()
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if result is None or code != 0:
        raise HadoopPeerError(f"the connector driver failed (exit {code}):\n{log_tail(log)}")
    throttled = stats["throttled"]["bucket"] + stats["throttled"]["injected"]
    success = result.get("success") or {}
    return {
        "wall_s": result["wall_s"], "cpu_s": result["process_cpu_s"], "gc_s": result["gc_s"],
        "requests": stats["ops"] - throttled, "throttled": throttled,
        "requests_by_op": stats.get("by_op", {}),
        "service_cpu_s": stats["cpu"]["total_s"],
        "success_marker": success.get("success"),
        "files_committed": _files_committed(success),
        "stages": _stages(success, float(result["wall_s"])),
        "protocol": result["protocol"], "committer_factory": result["committer_factory"],
        "warmup_s": warm.get("warmup_s"),
        "configuration": configuration_text(service, tuned),
        "job": job,
    }


def _files_committed(success: dict[str, Any]) -> int | None:
    counters = (success.get("iostatistics") or {}).get("counters") or {}
    value = counters.get("committer_files_committed")
    return int(value) if value is not None else None
