"""What a request costs the committing process at the service's pace: answers at once, or one
at a time.

The CPU the engine spends per request is not a constant of its code. Against a service that
answers one request at a time a few milliseconds apart (Azurite, fake-gcs-server: each bound
by its own thread), the request loop wakes for every answer alone, after an idle spell, and the
same work then costs the CPU more (cold caches) than the same requests answered back to back.
This suite measures that ratio with the engine's own store: Get Blob Properties of populated
objects (``stat_many``), ``--requests`` a run at the store's default concurrency, on the
simulated flat Blob account (``committer/testing/cloud_sim``, its own process) answering

- ``at-once``: each request after ``--latency-ms`` (a log-normal draw, p99 twice that),
  whatever the load: the answers come back to back;
- ``paced``: one request at a time, ``--pace`` a second (the simulator's ``serve_rate``, as
  an emulator bound by its CPU), each request waiting for those ahead of it.

Each run is a fresh interpreter (``benchmarks/request_pace.py <job.json>``) that opens the
store, sends ``--warmup`` requests first (connections opened, the account's kind learned) and
then times the run: its CPU (``getrusage``, every thread) and its request loop's thread alone,
per request. The two ways alternate in each repetition, on a fresh account each time.

    python -m benchmarks request-pace [--requests 2000 --pace 200 --repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, run_script, summarize

NAME = "request-pace"
TITLE = "Engine CPU per request: a service answering at once against one answering one at a time"
CONTAINER = "pace"
MODES = ("at-once", "paced")


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--requests", type=int, default=2_000,
                        help="requests timed in each run")
    parser.add_argument("--warmup", type=int, default=200,
                        help="requests sent before the timed part of each run")
    parser.add_argument("--pace", type=float, default=200.0,
                        help="requests a second the 'paced' account serves, one at a time")
    parser.add_argument("--latency-ms", type=float, default=1.0,
                        help="the account's latency per request (median; p99 twice it)")
    parser.add_argument("--repeats", type=int, default=5)


def _key(i: int) -> str:
    return f"objects/o{i:06d}"


def _one(mode: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One run: a fresh account in ``mode``, populated, measured by a fresh interpreter."""
    from committer.testing.cloud_sim import start_cloud_sim

    total = args.warmup + args.requests
    with start_cloud_sim(service="blob", latency_ms=args.latency_ms,
                         p99_ms=2 * args.latency_ms, seed=seed,
                         serve_rate=args.pace if mode == "paced" else 0.0) as sim:
        stored = sim.populate_count({"bucket": CONTAINER, "key": _key(i), "size": 100}
                                    for i in range(total))
        if stored != total:
            raise SystemExit(f"populated {stored} objects, not {total}")
        load = os.getloadavg()[0]
        job = {"location": f"{sim.scheme}://{CONTAINER}", "options": sim.trusted_options,
               "warmup": args.warmup, "requests": args.requests}
        trial = run_script(Path(__file__).resolve(), job, 3600)
        served = sim.stats()["requests"]
    if served < total:
        raise SystemExit(f"the account served {served} requests, fewer than {total}")
    return {"mode": mode, "seed": seed, "load_before": round(load, 2), **trial}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.requests < 1 or args.warmup < 0 or args.pace <= 0 or args.repeats < 1:
        raise SystemExit("--requests and --repeats at least 1, --pace above 0")
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        order = MODES if rep % 2 == 0 else MODES[::-1]
        for mode in order:
            one = _one(mode, args, seed=4700 + rep)
            one["repeat"] = rep
            runs.append(one)
            print(f"{mode:8} rep {rep + 1}: {one['cpu_us']:.0f} us CPU a request (request loop "
                  f"{one['loop_cpu_us']:.0f}), wall {one['wall_s']:.2f} s, load "
                  f"{one['load_before']}", file=sys.stderr, flush=True)
    summary = {mode: {"cpu_us": summarize([r["cpu_us"] for r in runs if r["mode"] == mode]),
                      "loop_cpu_us": summarize([r["loop_cpu_us"] for r in runs
                                                if r["mode"] == mode]),
                      "wall_s": summarize([r["wall_s"] for r in runs if r["mode"] == mode])}
               for mode in MODES}
    ratio = summary["paced"]["cpu_us"]["median"] / summary["at-once"]["cpu_us"]["median"]
    return {"requests": args.requests, "warmup": args.warmup, "pace": args.pace,
            "latency_ms": args.latency_ms, "repeats": args.repeats, "runs": runs,
            "summary": summary, "paced_over_at_once": round(ratio, 2)}


def report(result: dict[str, Any]) -> str:
    rows = []
    for mode, s in result["summary"].items():
        cpu, loop, wall = s["cpu_us"], s["loop_cpu_us"], s["wall_s"]
        rows.append([mode, f"{cpu['median']:.0f} ({cpu['min']:.0f}-{cpu['max']:.0f})",
                     f"{loop['median']:.0f} ({loop['min']:.0f}-{loop['max']:.0f})",
                     f"{wall['median']:.2f} ({wall['min']:.2f}-{wall['max']:.2f})"])
    return "\n".join([
        f"{result['requests']:,} Get Blob Properties a run (after {result['warmup']} not timed) "
        f"on the simulated flat Blob account: at once (latency {result['latency_ms']} ms), or "
        f"one at a time at {result['pace']:,.0f} a second; {result['repeats']} repetitions, "
        "alternated; median (min-max).", "",
        markdown_table(["account", "engine CPU us / request", "request loop us / request",
                        "wall s"], rows), "",
        f"Paced over at once: {result['paced_over_at_once']:.2f} times the CPU a request."])


# -- the trial: one run in a fresh interpreter ---------------------------------------------------


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def trial(path: str) -> int:
    job = json.loads(Path(path).read_text())
    from committer.config import CommitterConfig
    from committer.store import open_store
    from committer.store.http.loop import loop_cpu_seconds

    store = open_store(job["location"], CommitterConfig(storage_options=job["options"]))
    warmup, count = job["warmup"], job["requests"]
    base = job["location"].rstrip("/")
    try:
        if warmup:
            store.stat_many([f"{base}/{_key(i)}" for i in range(warmup)])
        paths = [f"{base}/{_key(i)}" for i in range(warmup, warmup + count)]
        loop0, cpu0, t0 = loop_cpu_seconds(), _cpu(), time.perf_counter()
        statuses = store.stat_many(paths)
        wall, cpu, loop1 = time.perf_counter() - t0, _cpu() - cpu0, loop_cpu_seconds()
    finally:
        store.close()
    missing = sum(1 for s in statuses if s is None)
    if missing:
        raise SystemExit(f"{missing} of {count} objects not found")
    loop_cpu = (loop1 - loop0) if loop0 is not None and loop1 is not None else float("nan")
    print(json.dumps({"cpu_us": cpu / count * 1e6, "loop_cpu_us": loop_cpu / count * 1e6,
                      "wall_s": wall}))
    return 0


if __name__ == "__main__":
    sys.exit(trial(sys.argv[1]))
