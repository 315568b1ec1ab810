"""One timed trial, in a fresh interpreter: ``python -m benchmarks.trial KIND PARAMS_JSON``.

Kinds:
- ``ceiling``: the job commit's file work done directly with ``os`` calls, paths known in
  advance (nothing read, nothing checked): create the partition directories, then for each task
  rename its files and remove its emptied tree (``os.rmdir`` bottom-up, no listing), finally the
  ``tasks`` directory. ``threads`` 0 is serial on the calling thread; ``threads`` N starts N
  threads, each taking its own contiguous share of the tasks (no per-file scheduling).
  ``relative``: the same calls relative to the task attempt and destination directories,
  opened once per task (``src_dir_fd`` / ``dir_fd``).
- ``dir-ceiling``: for a job whose tasks each write one partition of their own, each task's
  partition directory renamed whole with ``os.rename`` and its attempt directory removed
  (what the directory fast path's store calls cost, with nothing read or checked).
- ``floor``: for the same job, only what issue 15's rules make any directory fast path do:
  parse every manifest, then stat every file of each task's partition (the engine's C loop);
  nothing checked, moved or removed (``_floor``).
- ``ours``: ``JobCommitter.commit()`` of the whole job: list and load the manifests, check every
  entry, create directories, rename, write ``_SUCCESS``, clean up the job directory.
- ``hadoop-manifest``: Hadoop's own ``ManifestCommitter.commitJob`` (pyspark's hadoop-client-api
  jar, over Py4J from a local SparkSession) of the same job generated in Hadoop's naming
  (``_temporary/<jobId>``). Starting the JVM is not timed, and by default a small job is
  committed first in the same JVM (untimed) so class loading and JIT warm-up are not timed
  either; only the ``commitJob`` call is.
- ``hadoop-v1``: Hadoop's ``FileOutputCommitter`` (algorithm v1) ``commitJob`` of the same files
  laid out as v1 task commit leaves them (``benchmarks/hadoop_v1.py``), JVM and warm-up as for
  ``hadoop-manifest``.

Prints one JSON object: elapsed seconds of the timed part, peak RSS of this process, and its RSS
just before the timed part (the interpreter and imports).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from benchmarks.common import CpuMeter, current_rss_bytes, peak_rss_bytes
from benchmarks.jobtree import Shape, TaskPaths, iter_tasks, partition_name

T = TypeVar("T")


def _ceiling(shape: Shape, threads: int, relative: bool = False) -> dict[str, Any]:
    tasks: list[TaskPaths] = list(iter_tasks(shape))
    dest = shape.layout.dest
    dest_dirs = [f"{dest}/{partition_name(k)}" for k in range(shape.partition_count)]
    rename, rmdir = os.rename, os.rmdir

    split = [0.0, 0.0]  # seconds in renames, in removals (summed over threads)
    clock = time.perf_counter

    def work(share: list[TaskPaths]) -> None:
        in_rename = in_rmdir = 0.0
        for tp in share:
            t0 = clock()
            for src, dst in tp.renames:
                rename(src, dst)
            t1 = clock()
            for d in tp.dirs:
                rmdir(d)
            rmdir(tp.attempt_dir)
            in_rename += t1 - t0
            in_rmdir += clock() - t1
        split[0] += in_rename
        split[1] += in_rmdir

    def work_relative(share: list[TaskPaths]) -> None:
        # the same calls relative to open directories: the attempt directory and the destination
        # (what the engine's local loop does), so the kernel walks two components per path
        dest_fd = os.open(dest, os.O_PATH | os.O_DIRECTORY)
        cut_d = len(dest) + 1
        in_rename = in_rmdir = 0.0
        for tp in share:
            t0 = clock()
            fd = os.open(tp.attempt_dir, os.O_PATH | os.O_DIRECTORY)
            cut = len(tp.attempt_dir) + 1
            for src, dst in tp.renames:
                rename(src[cut:], dst[cut_d:], src_dir_fd=fd, dst_dir_fd=dest_fd)
            t1 = clock()
            for d in tp.dirs:
                rmdir(d[cut:], dir_fd=fd)
            os.close(fd)
            rmdir(tp.attempt_dir)
            in_rename += t1 - t0
            in_rmdir += clock() - t1
        os.close(dest_fd)
        split[0] += in_rename
        split[1] += in_rmdir

    if relative:
        work = work_relative

    gc.collect()
    base = current_rss_bytes()
    cpu = CpuMeter()
    t0 = time.perf_counter()
    for d in dest_dirs:
        os.makedirs(d, exist_ok=True)
    _run_shares(work, tasks, threads)
    os.rmdir(shape.layout.tasks_dir)
    elapsed = time.perf_counter() - t0
    return {"elapsed": elapsed, "base_rss": base, "cpu": cpu.read(), "rename_seconds": split[0],
            "rmdir_seconds": split[1], "threads": threads, "relative": relative}


def _run_shares(work: Callable[[list[T]], None], tasks: list[T], threads: int) -> None:
    """``work`` over ``tasks``: on this thread (``threads <= 0``), else one contiguous share
    per thread, as a hand-written ceiling would split the job."""
    if threads <= 0:
        work(tasks)
        return
    per = -(-len(tasks) // threads)
    workers = [threading.Thread(target=work, args=(tasks[i * per : (i + 1) * per],))
               for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _directory_ceiling(shape: Shape, threads: int) -> dict[str, Any]:
    """The directory fast path's ceiling: each task's partition directory renamed whole
    (``os.rename``), then its emptied attempt directory removed; nothing listed or checked.
    Only for ``own_partitions`` jobs, where each partition is one task's."""
    if not shape.own_partitions:
        raise SystemExit("the directory ceiling needs a job with own_partitions")
    tasks: list[TaskPaths] = list(iter_tasks(shape))
    dest = shape.layout.dest
    rename, rmdir = os.rename, os.rmdir

    def work(share: list[TaskPaths]) -> None:
        for tp in share:
            for d in tp.dirs:
                rename(d, f"{dest}/{d.rpartition('/')[2]}")
            rmdir(tp.attempt_dir)

    gc.collect()
    base = current_rss_bytes()
    cpu = CpuMeter()
    t0 = time.perf_counter()
    _run_shares(work, tasks, threads)
    os.rmdir(shape.layout.tasks_dir)
    elapsed = time.perf_counter() - t0
    return {"elapsed": elapsed, "base_rss": base, "cpu": cpu.read(), "threads": threads}


def _floor(shape: Shape, threads: int) -> dict[str, Any]:
    """The least a directory fast path must do under issue 15's own rules, with nothing else:
    parse every manifest (orjson on one thread: parsing holds the GIL, and every manifest is
    read before anything may move), then one ``fstatat`` per file to prove each task's
    partition holds its files (the engine's C loop, ``_native.regular_files``, GIL released,
    ``threads`` threads with contiguous shares). The names are computed in advance, untimed;
    nothing is checked, moved or removed. Only for ``own_partitions`` jobs."""
    import orjson

    from committer.store.local import _native

    if not shape.own_partitions:
        raise SystemExit("the floor needs a job with own_partitions")
    tasks: list[TaskPaths] = list(iter_tasks(shape))
    work_of = [(tp.dirs[0], [src.rpartition("/")[2] for src, _ in tp.renames]) for tp in tasks]
    manifests = shape.layout.manifests_dir
    paths = sorted(os.path.join(manifests, n) for n in os.listdir(manifests))
    found = [0]
    lock = threading.Lock()

    def prove(share: list[tuple[str, list[str]]]) -> None:
        n = 0
        for directory, names in share:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                n += _native.regular_files(fd, names, [0] * len(names))
            finally:
                os.close(fd)
        with lock:
            found[0] += n

    gc.collect()
    base = current_rss_bytes()
    cpu = CpuMeter()
    t0 = time.perf_counter()
    entries = 0
    for path in paths:
        with open(path, "rb") as f:
            entries += len(orjson.loads(f.read())["files"])
    t1 = time.perf_counter()
    _run_shares(prove, work_of, threads)
    t2 = time.perf_counter()
    if entries != shape.files or found[0] != shape.files:
        raise SystemExit(f"floor: {entries} manifest entries, {found[0]} files proven, "
                         f"expected {shape.files}")
    return {"elapsed": t2 - t0, "parse_seconds": t1 - t0, "proof_seconds": t2 - t1,
            "base_rss": base, "cpu": cpu.read(), "threads": threads}


def _ours(shape: Shape, params: dict[str, Any]) -> dict[str, Any]:
    from committer import statistics as st
    from committer.config import CommitterConfig
    from committer.job.committer import JobCommitter

    config = CommitterConfig(**params.get("config", {}))
    if params.get("baseline"):
        _engine_as_before()
    gc.collect()
    base = current_rss_bytes()
    cpu = CpuMeter()
    t0 = time.perf_counter()
    job = JobCommitter(shape.dest, shape.job_id, config=config)
    summary = job.commit()
    elapsed = time.perf_counter() - t0
    cpu_used = cpu.read()
    snap = job.store.stats.snapshot()
    stages = {}
    for name in (st.STAGE_LOAD_MANIFESTS, st.STAGE_CREATE_TARGET_DIRS, st.STAGE_RENAME_FILES,
                 st.STAGE_CLEANUP):
        mean = snap.meanstatistics.get(f"{name}.mean")
        if mean is not None:
            stages[name] = mean.sum / 1000.0
    return {
        "elapsed": elapsed,
        "base_rss": base,
        "cpu": cpu_used,
        "stages": stages,
        "files_committed": summary.metrics.get(st.COMMITTER_FILES_COMMITTED),
        "directories_moved": snap.counters.get(st.OP_RENAME_DIRECTORY, 0),
        "file_renames": snap.counters.get(st.OP_RENAME, 0),
        "plan_spilled": summary.diagnostics.get("plan.spilled"),
    }


def _spark(params: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("hadoop-manifest-committer-trial")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", str(params.get("driver_memory", "2g")))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _hadoop_v1(shape: Shape, params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.hadoop_v1 import commit_v1, generate_v1, verify_v1
    from benchmarks.jobtree import remove

    spark = _spark(params)
    try:
        warmup_seconds = None
        if params.get("warmup", True):
            warm = Shape(shape.dest.rstrip("/") + "-warmup", tasks=50, files_per_task=20,
                         partitions=10)
            remove(warm)
            generate_v1(warm, workers=1)
            warmup_seconds = commit_v1(spark, warm)
            if verify_v1(warm) != warm.files:
                raise AssertionError("v1 warm-up job lost files")
            remove(warm)
        gc.collect()
        base = current_rss_bytes()
        elapsed = commit_v1(spark, shape)
    finally:
        spark.stop()
    return {"elapsed": elapsed, "base_rss": base, "warmup_seconds": warmup_seconds,
            "files_committed": verify_v1(shape)}


def _hadoop_manifest(shape: Shape, params: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.jobtree import generate, remove, verify_committed

    spark = _spark(params)
    jvm: Any = spark.sparkContext._jvm
    mr = jvm.org.apache.hadoop.mapreduce
    base_conf = spark.sparkContext._jsc.hadoopConfiguration()
    extra: dict[str, str] = dict(params.get("hadoop_conf", {}))

    def commit_job(job: Shape) -> float:
        conf = jvm.org.apache.hadoop.conf.Configuration(base_conf)
        conf.set("spark.sql.sources.writeJobUUID", job.job_id)  # names _temporary/<jobId>
        for key, value in extra.items():
            conf.set(key, value)
        attempt = mr.TaskAttemptID("bench", 1, mr.TaskType.MAP, 0, 0)
        ctx = mr.task.TaskAttemptContextImpl(conf, attempt)
        committer = jvm.org.apache.hadoop.mapreduce.lib.output.committer.manifest \
            .ManifestCommitter(jvm.org.apache.hadoop.fs.Path(job.dest), ctx)
        job_ctx = mr.task.JobContextImpl(conf, mr.JobID("bench", 1))
        t0 = time.perf_counter()
        committer.commitJob(job_ctx)
        return time.perf_counter() - t0

    try:
        warmup_seconds = None
        if params.get("warmup", True):
            warm = Shape(shape.dest.rstrip("/") + "-warmup", tasks=50, files_per_task=20,
                         partitions=10, job_id=shape.job_id + "w", hadoop_naming=True)
            remove(warm)
            generate(warm, workers=1)
            warmup_seconds = commit_job(warm)
            verify_committed(warm)
            remove(warm)
        gc.collect()
        base = current_rss_bytes()
        elapsed = commit_job(shape)
        io_threads = spark.sparkContext._jsc.hadoopConfiguration().get(
            "mapreduce.manifest.committer.io.threads")
    finally:
        spark.stop()
    # Hadoop's own account, from the _SUCCESS it wrote (its cleanup stage runs after the marker)
    with open(os.path.join(shape.dest, "_SUCCESS"), "rb") as f:
        iostats = json.load(f).get("iostatistics", {})
    means = iostats.get("meanstatistics", {})
    stages = {}
    for name in ("job_stage_load_manifests", "job_stage_create_target_dirs",
                 "job_stage_rename_files"):
        mean = means.get(f"{name}.mean")
        if mean and mean.get("samples"):
            stages[name] = mean["sum"] / 1000.0
    return {"elapsed": elapsed, "base_rss": base, "warmup_seconds": warmup_seconds,
            "hadoop_conf": extra, "io_threads_setting": io_threads, "stages": stages,
            "files_committed": iostats.get("counters", {}).get("committer_files_committed")}


def _engine_as_before() -> None:
    """The engine as it was before its local-disk tuning (for a before/after in one run): no
    pruning of emptied task trees during the renames, ``rename_file`` per entry (a shared
    statistics lock and limiter check per file), 2 x io_threads manifests read and parsed at
    once on the pool."""
    from committer.store.managed import ManagedStore

    def rename_each(self: ManagedStore, entries: Any) -> None:
        for src, dst, size, etag in entries:
            self.rename_file(src, dst, size=size, etag=etag)

    ManagedStore.prunes_empty_dirs = property(lambda self: False)  # type: ignore[method-assign,assignment]
    ManagedStore.rename_batch = rename_each  # type: ignore[method-assign,assignment]
    # and manifests parsed on the pool as before, 2 x io_threads at once, on local disk too
    from committer.job.stages import load_manifests
    from committer.parallel import prefetched

    def loaded_on_pool(executor: Any, work: Any, loader: Any, window: int) -> Any:
        return prefetched(executor, work, loader.load, window=window)

    load_manifests.load_window = lambda ctx: ctx.window
    load_manifests.loaded_manifests = loaded_on_pool


def main(argv: list[str]) -> int:
    kind, params = argv[0], json.loads(argv[1])
    shape = Shape.from_json(params["shape"])
    if kind == "ceiling":
        out = _ceiling(shape, int(params.get("threads", 0)), bool(params.get("relative")))
    elif kind == "dir-ceiling":
        out = _directory_ceiling(shape, int(params.get("threads", 0)))
    elif kind == "floor":
        out = _floor(shape, int(params.get("threads", 0)))
    elif kind == "ours":
        out = _ours(shape, params)
        out["baseline"] = bool(params.get("baseline"))
    elif kind == "hadoop-manifest":
        out = _hadoop_manifest(shape, params)
    elif kind == "hadoop-v1":
        out = _hadoop_v1(shape, params)
    else:
        raise SystemExit(f"unknown trial kind {kind!r}")
    out["peak_rss"] = peak_rss_bytes()
    out["kind"] = kind
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
