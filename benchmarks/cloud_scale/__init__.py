"""``python -m benchmarks cloud-scale``: job commit at internet scale on a simulated account.

    python -m benchmarks cloud-scale --service adls --files 1000000 --tasks 1000 \\
        --latency-ms 20 --ops-limit 20000 --json OUT.json

The simulated service (``committer.testing.cloud_sim``: Azure Blob + Data Lake, or the GCS
JSON API, in memory, its own process on 127.0.0.1) answers after a lognormal latency (median
``--latency-ms``, 99th percentile ``--p99-ms``) and throttles above ``--ops-limit`` requests a
second (503 / 429 with Retry-After). The job is put into the account directly (``job.py``: no
million uploads), then ``JobCommitter.commit`` runs as a driver would, in a fresh interpreter
(``trial.py``), knowing nothing of the account's limit: its adaptive concurrency finds it.

What is reported (``OUT``, and ``cloud-scale-*.json`` in the results directory):
``files_committed``; ``destination_exact`` (every file where its manifest says, with the
manifest's size and identity, no source left, nothing else but the committer's own files);
``wall_s``; ``throttle_bound_s`` (the operations the account served / its rate: no commit on
this account can be faster); ``engine_cpu_s`` (the committing process and its workers);
``cpus``; ``machine_bound_s`` and ``machine_bound_term`` (``bound.py``: the largest of the
account's bound, engine CPU / CPUs and (engine + simulator CPU) / CPUs, and which of them held
the run back: on one machine the simulator and the engine share the CPUs); ``requests``
(operations the account served, a batch's sub-requests each counted); ``throttled`` (answers
refused by the throttle); ``peak_rss_mb`` (the committing process); the simulator's own CPU
and memory apart. A plot shows throughput and requests in flight
over time, as the service saw them, and the engine's adaptive limit.

On GCS, ``--gcs-bucket cold`` is a bucket as Google documents a new one (``committer/testing/
cloud_sim/gcs_rates.py``: 1,000 writes and 5,000 reads a second, doubling at most every 20
minutes of sustained load, ``--gcs-time-scale`` times faster; ``--ops-limit`` is then only the
ramp's ceiling, 0 none); warm (the default) is the flat ``--ops-limit`` every GCS figure before
issue 46 was measured on. A cold run also reports ``ramp_bound_s``, the least time the
documented ramp allows for the writes the bucket served (``gcs_rates.ramp_bound_s``), and
``wall_vs_ramp_bound``; and ``refused_share``, the share of the requests sent that were
refused. ``--gcs-move`` serves the objects move API (one write a rename; without it, as
fake-gcs-server: a rewrite and a delete), ``--gcs-hns`` gives the bucket a hierarchical
namespace (folders: a task's directory moves by one folder rename), ``--owned`` has each task
write into a directory of its own (``job.py``), ``--rename-directories no`` turns the
directory fast path off (the same commit file by file).

For jobs of at most ``FLOOR_FILES`` files (or with ``--floor yes``), the same job is put into
the account again and committed by a bare client (``floor.py``: the least sequence of
dependent requests the protocol needs, everything of a step sent at once, no journal, no
checks, no concurrency limit): ``floor_s``, its steps, and ``wall_vs_floor``, the commit's
ratio to it (issue 33's target: at most ``TARGET_FLOOR_FACTOR``).
"""

from __future__ import annotations

import argparse
import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table, plot_lines, run_script

NAME = "cloud-scale"
TITLE = "Job commit at internet scale on a simulated account (latency, throttling)"
SERVICES = ("adls", "blob", "gcs")
TARGET_WALL_FACTOR = 1.25
TARGET_THROTTLED = 0.10
TARGET_RSS_MB = 300
#: jobs up to this size also get their floor measured (``floor.py``), and its target (issue 33)
FLOOR_FILES = 50_000
TARGET_FLOOR_FACTOR = 1.5
#: a cold GCS bucket (issue 46): the wall within this of the ramp's bound, at most this share
#: of the requests sent refused
TARGET_RAMP_FACTOR = 1.15
TARGET_RAMP_REFUSED = 0.02


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--service", choices=SERVICES, default="adls")
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100,
                        help="destination directories every task writes into")
    parser.add_argument("--latency-ms", type=float, default=20.0,
                        help="median latency of the simulated service")
    parser.add_argument("--p99-ms", type=float, default=200.0)
    parser.add_argument("--ops-limit", type=float, default=20_000,
                        help="requests per second the simulated account serves (0: no limit)")
    parser.add_argument("--serve-rate", type=float, default=0.0,
                        help="operations per second the simulated service works through one "
                             "after another: a latency that rises with the load (0: none)")
    parser.add_argument("--throttle-rate", type=float, default=0.0,
                        help="fraction of requests answered as throttled, at random")
    parser.add_argument("--lose-rate", type=float, default=0.0,
                        help="fraction of requests carried out whose answer is lost")
    parser.add_argument("--processes", type=int, default=0,
                        help="store.processes for the commit (0: as many as CPUs)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="requests in flight at most (default: the backend's)")
    parser.add_argument("--rate-limit", type=int, default=0,
                        help="the commit's static cap, io.rate.limit, in operations/s (default "
                             "0: none, the adaptive limit alone finds the account's rate)")
    parser.add_argument("--spark-defaults", action="store_true",
                        help="commit with the configuration the Spark path builds from an "
                             "empty Hadoop configuration (config_for_location(CommitterConfig."
                             "from_hadoop_conf({}), {}, dest): the default static cap of a "
                             "cloud store); --rate-limit and --processes are not applied")
    parser.add_argument("--floor", choices=("auto", "yes", "no"), default="auto",
                        help="also measure the floor (floor.py: the least sequence of dependent "
                             "requests, sent by a bare client) on the same account after the "
                             "commit; auto: for jobs of at most 50,000 files")
    parser.add_argument("--gcs-bucket", choices=("warm", "cold"), default="warm",
                        help="GCS: warm (the flat --ops-limit) or cold (a new bucket as Google "
                             "documents it: 1,000 writes / 5,000 reads a second, ramping)")
    parser.add_argument("--gcs-time-scale", type=float, default=1.0,
                        help="GCS, cold: the ramp's 20 minutes a doubling divided by this")
    parser.add_argument("--gcs-move", action="store_true",
                        help="GCS: the bucket offers the objects move API")
    parser.add_argument("--gcs-hns", action="store_true",
                        help="GCS: the bucket has a hierarchical namespace (folders)")
    parser.add_argument("--owned", action="store_true",
                        help="each task writes into a directory of its own (p=<task>)")
    parser.add_argument("--rename-directories", choices=("yes", "no"), default="yes",
                        help="the directory fast path (rename.directories); no: file by file")
    parser.add_argument("--seed", type=int, default=21,
                        help="the simulator's seed: its latency draws are picked in the order "
                             "requests arrive, so a commit's first requests meet the same tails "
                             "in every run of one seed; vary it to sample where they fall")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


def _check(sim: Any, job: Any) -> dict[str, Any]:
    """Is every file where its manifest says, and nothing else there?"""
    from benchmarks.cloud_scale.job import BUCKET
    from committer.testing.cloud_sim import CloudSim

    assert isinstance(sim, CloudSim)
    found: dict[str, tuple[int, str, str]] = {}
    for obj in sim.objects(BUCKET, "table/"):
        if not obj.get("is_dir"):
            found[obj["key"]] = (obj["size"], str(obj["etag"]).strip('"'), obj["md5"])
    missing, wrong, extra = [], [], []
    service = job.service
    for key, (size, ident) in job.expected.items():
        got = found.pop(key, None)
        if got is None:
            missing.append(key)
            continue
        got_ident = got[1] if service == "adls" else "md5:" + base64.b64decode(got[2]).hex()
        if got[0] != size or got_ident != ident:
            wrong.append(key)
    # directory markers: a flat namespace has no directories, so mkdirs leaves an empty
    # object ("dir" with hdi_isfolder on Blob, "dir/" on GCS)
    directories = {key.rsplit("/", 1)[0] for key in job.expected} | {"table"}
    for key, (size, _, _) in found.items():
        name = key[len("table/"):]
        if name == "_SUCCESS" or name.startswith("_manifest_committer/"):
            continue
        if size == 0 and key.rstrip("/") in directories:
            continue
        extra.append(key)
    return {"destination_exact": not (missing or wrong or extra), "missing": len(missing),
            "wrong": len(wrong), "extra": len(extra), "examples": (missing + wrong + extra)[:5]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.cloud_scale.bound import machine_bound
    from benchmarks.cloud_scale.job import generate
    from committer.config import CommitterConfig
    from committer.store.fanout import cpus
    from committer.testing.cloud_sim import start_cloud_sim

    options_changes: dict[str, Any] = {
        "service": args.service, "latency_ms": args.latency_ms,
        "p99_ms": args.p99_ms if args.latency_ms else 0.0, "ops_limit": args.ops_limit,
        "seed": args.seed,
        "serve_rate": getattr(args, "serve_rate", 0.0)}
    cold = args.service == "gcs" and getattr(args, "gcs_bucket", "warm") == "cold"
    if args.service == "gcs":
        options_changes.update(
            gcs_bucket=getattr(args, "gcs_bucket", "warm"),
            gcs_time_scale=getattr(args, "gcs_time_scale", 1.0),
            gcs_move=getattr(args, "gcs_move", False), gcs_hns=getattr(args, "gcs_hns", False))
    owned = getattr(args, "owned", False)
    fast_path = getattr(args, "rename_directories", "yes") == "yes"
    with start_cloud_sim(**options_changes) as sim:
        storage = sim.trusted_options
        if args.concurrency:
            storage["committer_concurrency"] = args.concurrency
        config: dict[str, Any] = {"storage_options": storage,
                                  "store_processes": args.processes,
                                  "io_rate_limit": args.rate_limit}
        if not fast_path:
            config["rename_directories"] = False
        t0 = time.perf_counter()
        job = generate(sim, args.service, args.files, args.tasks, args.partitions,
                       f"j{uuid.uuid4().hex[:12]}", CommitterConfig(**config), owned=owned)
        hadoop_conf: dict[str, str] = {}
        if args.spark_defaults:
            config = {"storage_options": storage}
            if not fast_path:  # as a Spark user turns it off
                hadoop_conf["mapreduce.manifest.committer.rename.directories"] = "false"
        prepare_s = time.perf_counter() - t0
        print(f"prepared {args.files} files in {args.tasks} tasks in {prepare_s:.1f} s",
              flush=True)
        if args.throttle_rate or args.lose_rate:
            sim.set_faults(throttle_rate=args.throttle_rate, lose_rate=args.lose_rate, seed=7)
        sim.reset_stats()
        rates0 = sim.gcs_rates() if cold else None
        trial = _run_trial({"config": config, "job": job.description(),
                            "spark_defaults": bool(args.spark_defaults),
                            "hadoop_conf": hadoop_conf})
        stats = sim.stats()
        timeline = sim.timeline()
        ramp = _ramp(sim, rates0) if rates0 is not None else None
        sim.set_faults(clear=True)
        check = _check(sim, job)
        floor: dict[str, Any] | None = None
        wanted = getattr(args, "floor", "auto")
        if wanted == "yes" or (wanted == "auto" and args.files <= FLOOR_FILES):
            # the same job again beside the first, committed by the bare client
            twin = generate(sim, args.service, args.files, args.tasks, args.partitions,
                            f"j{uuid.uuid4().hex[:12]}", CommitterConfig(**config),
                            table="floor", owned=owned)
            try:
                floor = _run_trial({"config": config, "job": twin.description(),
                                    "service": args.service}, "floor.py")
            except RuntimeError as e:  # reported, not the commit's failure
                print(f"the floor could not be measured: {e}", flush=True)
    throttled = stats["throttled"]["bucket"] + stats["throttled"]["injected"]
    served = stats["ops"] - throttled
    # a cold bucket's bound is its ramp's; its ceiling (--ops-limit) is not its rate
    bound = (ramp["ramp_bound_s"] if ramp is not None
             else served / args.ops_limit if args.ops_limit else 0.0)
    cpu_bound = trial["engine_cpu_s"] / cpus()
    # the machine's bound: the account, or the CPUs the engine and the simulator share
    machine_bound_s, machine_bound_term = machine_bound(
        bound, trial["engine_cpu_s"], stats["cpu"]["total_s"], cpus())
    result = {
        "service": args.service, "files": args.files, "tasks": args.tasks,
        "partitions": args.partitions, "latency_ms": args.latency_ms, "p99_ms": args.p99_ms,
        "ops_limit": args.ops_limit, "serve_rate": options_changes["serve_rate"],
        "throttle_rate": args.throttle_rate,
        "lose_rate": args.lose_rate, "seed": args.seed, "processes_setting": args.processes,
        "files_committed": trial["files_committed"], **check,
        "wall_s": trial["wall_s"], "throttle_bound_s": bound,
        "engine_cpu_s": trial["engine_cpu_s"], "cpus": cpus(),
        "engine_cpu_ms_per_file": trial["engine_cpu_s"] / args.files * 1000,
        "requests": served, "http_requests": stats["requests"], "throttled": throttled,
        "lost": stats["lost"], "peak_rss_mb": trial["peak_rss_mb"],
        "wall_vs_bound": trial["wall_s"] / max(bound, cpu_bound, 1e-9),
        "machine_bound_s": machine_bound_s, "machine_bound_term": machine_bound_term,
        "wall_vs_machine_bound": trial["wall_s"] / max(machine_bound_s, 1e-9),
        "spark_defaults": bool(args.spark_defaults), "rate_limit": trial["rate_limit"],
        "waits_ms": trial["waits_ms"],
        "sim_cpu_s": stats["cpu"]["total_s"],
        "sim_peak_rss_mb": stats["memory_kib"].get("peak_rss", 0) / 1024,
        "prepare_s": prepare_s, "trial": trial, "sim_stats": stats, "timeline": timeline,
        "plot_dir": str(args.out) if getattr(args, "out", None) else None,
        "floor": floor, "floor_s": floor["wall_s"] if floor else None,
        "wall_vs_floor": trial["wall_s"] / floor["wall_s"] if floor else None,
        "gcs_bucket": options_changes.get("gcs_bucket"),
        "gcs_time_scale": options_changes.get("gcs_time_scale"),
        "gcs_move": options_changes.get("gcs_move"), "gcs_hns": options_changes.get("gcs_hns"),
        "owned": owned, "rename_directories": fast_path,
        "refused_share": throttled / max(stats["ops"], 1),
        "ramp": ramp, "ramp_bound_s": ramp["ramp_bound_s"] if ramp else None,
        "wall_vs_ramp_bound": trial["wall_s"] / ramp["ramp_bound_s"]
        if ramp and ramp["ramp_bound_s"] else None,
    }
    result["targets"] = {
        "wall": result["wall_vs_bound"] <= TARGET_WALL_FACTOR,
        "throttled": throttled <= TARGET_THROTTLED * max(served, 1),
        "rss": result["peak_rss_mb"] <= TARGET_RSS_MB,
        "exact": check["destination_exact"],
    }
    if ramp is not None:
        result["targets"]["ramp_wall"] = result["wall_vs_ramp_bound"] <= TARGET_RAMP_FACTOR
        result["targets"]["ramp_refused"] = result["refused_share"] <= TARGET_RAMP_REFUSED
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return result


def _ramp(sim: Any, before: dict[str, Any]) -> dict[str, Any]:
    """What a cold GCS bucket's ramp did during the commit: the writes and reads it served and
    refused, the rates it reached, and the least time the documented ramp allows for those
    writes (``gcs_rates.ramp_bound_s``, from cold)."""
    from benchmarks.cloud_scale.job import BUCKET
    from committer.testing.cloud_sim.gcs_rates import ramp_bound_s

    after = sim.gcs_rates()
    now, was = after["buckets"].get(BUCKET, {}), before["buckets"].get(BUCKET, {})
    out: dict[str, Any] = {"doubling_s": after["doubling_s"], "t0": before["now"],
                           "object_refused": after["object_refused"] - before["object_refused"]}
    for kind in ("writes", "reads"):
        a, b = now.get(kind, {}), was.get(kind, {})
        out[kind] = {"served": a.get("served", 0) - b.get("served", 0),
                     "refused": a.get("refused", 0) - b.get("refused", 0),
                     "rate_start": b.get("rate"), "rate_end": a.get("rate"),
                     "loaded_s": a.get("loaded_s", 0) - b.get("loaded_s", 0)}
    out["ramp_bound_s"] = ramp_bound_s(out["writes"]["served"], doubling_s=out["doubling_s"])
    out["history"] = sim.gcs_rate_history(BUCKET)
    return out


def _run_trial(params: dict[str, Any], script: str = "trial.py") -> dict[str, Any]:
    return run_script(Path(__file__).with_name(script), params)


def report(result: dict[str, Any]) -> str:
    from benchmarks.cloud_scale.plot import plot

    gcs = ""
    if result.get("gcs_bucket"):
        gcs = (f"; GCS bucket {result['gcs_bucket']}"
               + (f" (ramp x{result['gcs_time_scale']:g} the documented pace)"
                  if result["gcs_bucket"] == "cold" else "")
               + (", move API" if result.get("gcs_move") else ", rewrite + delete")
               + (", hierarchical namespace" if result.get("gcs_hns") else ""))
    layout = (" (each task its own directory)" if result.get("owned") else "") + (
        "" if result.get("rename_directories", True) else ", directory fast path off")
    lines = [f"{result['service']}: {result['files']:,} files in {result['tasks']:,} tasks "
             f"over {result['partitions']} partitions{layout}; latency median "
             f"{result['latency_ms']} ms, p99 {result['p99_ms']} ms; account limit "
             f"{result['ops_limit']:,.0f} requests/s" + gcs
             + (f"; faults: {result['throttle_rate']:.0%} throttled, "
                f"{result['lose_rate']:.0%} answers lost"
                if result["throttle_rate"] or result["lose_rate"] else ""), ""]
    t = result["targets"]
    rows = [
        ["files committed", f"{result['files_committed']:,}", ""],
        ["destination exact", str(result["destination_exact"]), "yes" if t["exact"] else "NO"],
        ["wall s", f"{result['wall_s']:.1f}", ""],
        ["throttle bound s (requests / limit)", f"{result['throttle_bound_s']:.1f}", ""],
        ["engine CPU s (ms per file)",
         f"{result['engine_cpu_s']:.1f} ({result['engine_cpu_ms_per_file']:.3f})", ""],
        ["CPUs", str(result["cpus"]), ""],
        ["wall / max(bound, CPU/CPUs)", f"{result['wall_vs_bound']:.2f}",
         f"<= {TARGET_WALL_FACTOR}: " + ("met" if t["wall"] else "MISSED")],
        ["machine bound s: max(account bound, engine CPU/CPUs, (engine + simulator CPU)/CPUs)",
         f"{result['machine_bound_s']:.1f}", ""],
        ["held back by (the term that is the machine bound)",
         str(result.get("machine_bound_term", "")), ""],
        ["wall / machine bound", f"{result['wall_vs_machine_bound']:.2f}", ""],
        ["static rate cap (ops/s; 0: none)" + (" - Spark's defaults" if
                                               result["spark_defaults"] else ""),
         f"{result['rate_limit']:,}", ""],
        ["waits, ms (rename stage held by the cap; renames' cap, back-off)",
         ", ".join(f"{k}={v:,}" for k, v in result["waits_ms"].items()) or "none", ""],
        ["requests served", f"{result['requests']:,}", ""],
        ["throttled", f"{result['throttled']:,} "
         f"({result['throttled'] / max(result['requests'], 1):.1%})",
         f"<= {TARGET_THROTTLED:.0%}: " + ("met" if t["throttled"] else "MISSED")],
        ["peak RSS MiB (committing process)", f"{result['peak_rss_mb']:.0f}",
         f"<= {TARGET_RSS_MB}: " + ("met" if t["rss"] else "MISSED")],
        ["worker processes started", str(result["trial"]["processes_started"]), ""],
        *([["floor s: the least dependent requests, a bare client (floor.py)",
            f"{result['floor_s']:.2f} (" + ", ".join(
                f"{k} {v:.2f}" for k, v in result["floor"].items()
                if k not in ("total", "files", "wall_s")) + ")", ""],
           ["wall / floor", f"{result['wall_vs_floor']:.2f}",
            f"<= {TARGET_FLOOR_FACTOR}: " + ("met" if result["wall_vs_floor"]
                                            <= TARGET_FLOOR_FACTOR else "MISSED")]]
          if result.get("floor") else []),
        *([["cold bucket: writes served / refused, rate at start -> end (/s)",
            f"{result['ramp']['writes']['served']:,} / {result['ramp']['writes']['refused']:,}"
            f", {result['ramp']['writes']['rate_start']:,.0f} -> "
            f"{result['ramp']['writes']['rate_end']:,.0f}", ""],
           ["ramp bound s (the least time the documented ramp allows for those writes)",
            f"{result['ramp_bound_s']:.1f}", ""],
           ["wall / ramp bound", f"{result['wall_vs_ramp_bound']:.2f}",
            f"<= {TARGET_RAMP_FACTOR}: " + ("met" if t["ramp_wall"] else "MISSED")],
           ["requests refused / sent", f"{result['refused_share']:.2%}",
            f"<= {TARGET_RAMP_REFUSED:.0%}: " + ("met" if t["ramp_refused"] else "MISSED")]]
          if result.get("ramp") else []),
        ["simulator CPU s / peak RSS MiB (apart)",
         f"{result['sim_cpu_s']:.1f} / {result['sim_peak_rss_mb']:.0f}", ""],
    ]
    lines.append(markdown_table(["", "measured", "target"], rows))
    lines += plot_lines(plot, result)
    return "\n".join(lines)
