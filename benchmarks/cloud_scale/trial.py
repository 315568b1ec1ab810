"""One job commit against the simulated account, in a fresh interpreter:
``python benchmarks/cloud_scale/trial.py PARAMS.json``.

Measures what the committing process spends: CPU (``getrusage`` of this process, every thread
of it, plus the worker processes it started and waited for), wall time, peak resident set
(``VmHWM`` of this process, the largest worker's ``ru_maxrss``), and, every 100 ms, the
store's adaptive limit, its requests in flight and how busy the request loop's thread was
(its CPU time over the interval), and the garbage collector's time by generation.
Prints one JSON object.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _peak_rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(path: str) -> int:
    params: dict[str, Any] = json.loads(Path(path).read_text())
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    # what a long-running driver has imported already
    import adlfs  # noqa: F401
    import gcsfs.core  # noqa: F401

    import committer.store.azure
    import committer.store.gcs  # noqa: F401
    from committer import JobCommitter
    from committer.config import CommitterConfig
    from committer.statistics import WAITS
    from committer.store import open_store
    # the time the garbage collector took, by generation (it runs on whichever thread
    # allocates; reported, not changed)
    gc_log: list[tuple[int, float]] = []
    gc_t: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_t[0] = time.perf_counter()
        else:
            gc_log.append((info["generation"], time.perf_counter() - gc_t[0]))

    gc.callbacks.append(on_gc)
    # every stage of the commit, as it ends: (name, seconds since the start, seconds it took)
    stages: list[tuple[str, float, float]] = []

    class _Stages(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            name, took = record.args  # type: ignore[misc]
            stages.append((str(name), round(time.perf_counter() - t0, 3),
                           round(float(took), 3)))  # type: ignore[arg-type]

    stage_log = logging.getLogger("committer.job.stages.context")
    stage_log.setLevel(logging.DEBUG)
    stage_log.addHandler(_Stages())
    job = params["job"]
    if params.get("spark_defaults"):
        # as the Spark path builds it (committer/spark/engine.py) from a Hadoop configuration
        # with nothing set; the storage options reach the simulator, as Hadoop keys would
        from committer.store.credentials import config_for_location

        # (and the Hadoop keys the run sets, e.g. the directory fast path off)
        conf = params.get("hadoop_conf", {})
        config = config_for_location(CommitterConfig.from_hadoop_conf(
            conf, storage_options=params["config"]["storage_options"]), conf, job["dest"])
    else:
        config = CommitterConfig(**params["config"])
    samples: list[tuple[float, int, int, float, float]] = []
    stop = threading.Event()
    cpu0, children0, t0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), \
        time.perf_counter()
    store = open_store(job["dest"], config)

    def sample() -> None:
        from committer.store.http.loop import loop_cpu_seconds

        limit = getattr(store.backend, "limit", None)
        last_cpu, last = loop_cpu_seconds() or 0.0, time.perf_counter()
        while not stop.wait(0.1):
            cpu, now = loop_cpu_seconds() or 0.0, time.perf_counter()
            busy = round((cpu - last_cpu) / max(now - last, 1e-6), 3)
            last_cpu, last = cpu, now
            if limit is not None:  # its pace too: requests a second, 0 while it has none
                samples.append((round(now - t0, 3), limit.limit, limit.in_flight, busy,
                                round(limit.rate, 1)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    summary = JobCommitter(job["dest"], job["job_id"], config=config, store=store).commit(
        job["committed"])
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    cpu = _cpu(resource.RUSAGE_SELF) - cpu0
    workers_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
    pools = getattr(store.backend, "resources", [])
    limit = getattr(store.backend, "limit", None)
    hedger = getattr(store.backend, "hedger", None)
    counters = summary.iostatistics.counters
    print(json.dumps({
        "success": summary.success,
        "files_committed": summary.metrics.get("committer_files_committed"),
        "wall_s": wall, "engine_cpu_s": cpu + workers_cpu, "process_cpu_s": cpu,
        "workers_cpu_s": workers_cpu, "peak_rss_mb": _peak_rss_kib() / 1024,
        "workers_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "client_requests": sum(getattr(p, "requests", 0) for p in pools),
        "client_connections": sum(getattr(p, "connections_opened", 0) for p in pools),
        "client_throttled": limit.throttled if limit is not None else None,
        "limit_cuts": limit.cuts if limit is not None else None,
        "hedged": hedger.hedged if hedger is not None else None,
        "hedges_won": hedger.won if hedger is not None else None,
        "hedges_wasted": getattr(hedger, "wasted", None),
        "requests_sent": (hedger.sent + hedger.hedged
                          if hedger is not None and hasattr(hedger, "sent") else None),
        "strained": getattr(limit, "strained", None),
        "summary_requests": {k: v for k, v in counters.items() if k.startswith("store_io_request")},
        "processes_started": counters.get("store_processes_started", 0),
        "retries": counters.get("store_io_retry", 0),
        "rate_limit": store.rate_limit,
        "waits_ms": {name: summary.iostatistics.meanstatistics[f"{name}.mean"].sum
                     for name, _ in WAITS
                     if f"{name}.mean" in summary.iostatistics.meanstatistics},
        "stages_ms": {k[:-len(".mean")]: v.sum for k, v in
                      summary.iostatistics.meanstatistics.items()
                      if k.startswith("job_stage_") and k.endswith(".mean")},
        "stages": stages,
        "limit_samples": samples,
        "gc": {str(g): [sum(1 for x in gc_log if x[0] == g),
                        round(sum(x[1] for x in gc_log if x[0] == g), 3)] for g in (0, 1, 2)},
    }))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
