"""``python -m benchmarks cloud-peers``: the same job committed by this engine and by what a
user would run instead, side by side, on the same simulated service.

    python -m benchmarks cloud-peers --service adls --files 100000 --latency-ms 20 \\
        --ops-limit 20000 --json OUT.json

Rows (``--rows``, all by default):

- ``engine``: this engine's job commit as ``cloud-scale --spark-defaults`` runs it (the
  configuration the Spark path builds from an empty Hadoop configuration), in its own
  interpreter (``benchmarks/cloud_scale/trial.py``);
- ``engine-account-rate``: the same, its static cap (``io.rate.limit``) set to the account's
  limit (``--ops-limit``) instead of the default 20,000/s (``cloud-scale --rate-limit``): the
  engine tuned for the account, to set beside Hadoop tuned;
- ``hadoop-defaults`` / ``hadoop-tuned``: Spark's binding for Hadoop's committers
  (spark-hadoop-cloud's ``PathOutputCommitProtocol``) committing with Hadoop's
  ManifestCommitter through the real connector, hadoop-azure's ABFS (Data Lake; flat Blob
  through its Blob client) or Google's GCS connector, over HTTP against this run's simulated
  account (``connectors.py``): Hadoop's defaults (32 io threads, ``fs.azure.io.rate.limit``
  1,000/s) or tuned (256 threads, no rate limit). On gcs the connector renames by the objects
  move API: the rows need ``--gcs-move`` (the account then offers it to every row);
- ``fsspec-bulk`` / ``fsspec-pool``: adlfs (adls, blob) or gcsfs (gcs), the job's renames as a
  user would write them without a committer (``clients.py``): one ``mv`` of the lists, or a
  thread pool of single ``mv`` calls (``--fsspec-forms``; ``bulk`` by default, the faster);
- ``obstore``: copy + delete with obstore, every copy gathered under a semaphore, then the
  deletes (Blob Batch on Azure; on GCS one delete a file, the XML API's, which the simulator
  serves for it); with obstore's own retries, or ``--obstore-retries N`` (its defaults gave up
  on a throttled Blob Batch at a million files).

Every row starts from the same account: the simulator is
reset (``POST /reset``), the job is put into it again (``cloud_scale/job.py``: manifests and
content-less sources; for the Hadoop rows the same files in Hadoop's layout and manifests,
``connectors.py``), its statistics are reset, the row runs in a child process (so its CPU is
its own: ``getrusage`` in that child, the JVM's process CPU for the Hadoop rows), then the
account is read back: every destination file must exist with its size
and no source may be left (``destination_exact``). Per row: wall, files/s, ``requests`` (served
by the account), ``throttled``, ``cpu_s`` (the committing process), the simulator's CPU, the
machine's bound (``cloud_scale/bound.py``: which of the account, the committing process's CPU
or that and the simulator's together held the row back) and ``vs_engine`` (the row's wall /
the engine's: how many times faster the engine was; ``vs_engine_account_rate`` the same against
the ``engine-account-rate`` row), and ``load_1m``, the machine's 1-minute
load average before and after the row (the figures of a shared machine need it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, markdown_table, plot_lines, run_script

NAME = "cloud-peers"
TITLE = "Job commit against its peers on a simulated account (Hadoop, fsspec, obstore)"
SERVICES = ("adls", "blob", "gcs")
ROWS = ("engine", "engine-account-rate", "hadoop-defaults", "hadoop-tuned", "fsspec", "obstore")
FSSPEC_FORMS = ("bulk", "pool")
#: the issue's targets: the engine's wall at least this many times faster than the row's
TARGETS = {"hadoop-defaults": 5.0, "hadoop-tuned": 1.5, "fsspec-bulk": 3.0,
           "fsspec-pool": 3.0, "obstore": 1.2}
#: obstore's target holds on the flat namespaces only (Data Lake renames are one request)
OBSTORE_TARGET_SERVICES = ("blob", "gcs")


def add_account_arguments(parser: argparse._ArgumentGroup, gcs_move: str) -> None:
    """The simulated account's options, shared by ``cloud-peers`` and ``cloud-writes`` so that
    their rows run against the same service model; ``gcs_move`` says who uses the move API."""
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--p99-ms", type=float, default=200.0)
    parser.add_argument("--ops-limit", type=float, default=20_000,
                        help="requests per second the simulated account serves (0: no limit)")
    parser.add_argument("--gcs-move", action="store_true",
                        help=f"gcs: the account serves the objects move API (the real "
                             f"service has it; {gcs_move})")


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--service", choices=SERVICES, default="adls")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks of the job (default: files / 100, at least 1)")
    parser.add_argument("--partitions", type=int, default=100)
    add_account_arguments(parser, gcs_move="every row may use it")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"which rows, comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--fsspec-forms", default="bulk",
                        help="fsspec forms, comma-separated: bulk (one mv of the lists), pool "
                             "(a thread pool of single mv calls)")
    parser.add_argument("--pool-threads", type=int, default=64,
                        help="threads of the fsspec pool form")
    parser.add_argument("--obstore-concurrency", type=int, default=256,
                        help="obstore requests in flight at most (its semaphore)")
    parser.add_argument("--obstore-retries", type=int, default=None,
                        help="obstore's RetryConfig max_retries, with a 10-minute "
                             "retry_timeout (default: obstore's own)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the rows this many times, each pass in the other order "
                             "(alternated); a row's ratios are to the engine of its pass")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")


# -- the job ---------------------------------------------------------------------------------

def _pairs(job: Any, tasks: int, partitions: int) -> list[list[str]]:
    """The job's (source key, destination key) pairs, named as ``job.generate`` names them;
    checked against the destinations it recorded."""
    from benchmarks.cloud_scale.job import BUCKET
    from committer import task_ids
    from committer.layout import JobLayout

    layout = JobLayout(job.dest, job.job_id)
    per_task = [job.files // tasks + (1 if t < job.files % tasks else 0) for t in range(tasks)]
    prefix = f"{job.dest.split('://', 1)[0]}://{BUCKET}/"
    pairs: list[list[str]] = []
    first = 0
    for t in range(tasks):
        _, attempt = task_ids(job.job_id, t)
        root = layout.task_attempt_dir(attempt)[len(prefix):]
        for i in range(per_task[t]):
            rel = f"p={(first + i) % partitions:04d}/part-{t:05d}-{i:05d}.parquet"
            pairs.append([f"{root}/{rel}", f"{job.dest[len(prefix):]}/{rel}"])
        first += per_task[t]
    if {d for _, d in pairs} != set(job.expected):
        raise RuntimeError("cloud-peers: the job's pairs differ from the job cloud_scale/job.py "
                           "generated (its naming changed?)")
    return pairs


def _verify(sim: Any, job: Any, pairs: list[list[str]]) -> dict[str, Any]:
    """Every destination file there with its size, no source left, nothing else but the
    committer's own files and directory markers."""
    from benchmarks.cloud_scale.job import BUCKET

    found = {o["key"]: int(o["size"]) for o in sim.objects(BUCKET, "") if not o.get("is_dir")}
    sources = {s for s, _ in pairs}
    missing = [k for k, (size, _) in job.expected.items() if found.get(k) != size]
    left = [s for s in sources if s in found]
    table = job.dest.split("://", 1)[1].split("/", 1)[1] + "/"
    directories = {k.rsplit("/", 1)[0] for k in job.expected} | {table.rstrip("/")}
    extra = [k for k, size in found.items()
             if k.startswith(table) and k not in job.expected and k not in sources
             and not k[len(table):].startswith(("_temporary/", "_manifest_committer/",
                                                "_SUCCESS"))
             and not (size == 0 and k.rstrip("/") in directories)]
    return {"destination_exact": not (missing or left or extra), "missing": len(missing),
            "sources_left": len(left), "extra": len(extra),
            "examples": (missing + left + extra)[:5]}


# -- rows ------------------------------------------------------------------------------------

def _child(script: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_script(ROOT / "benchmarks" / script, params)


def _sim_row(sim: Any, args: argparse.Namespace, tasks: int, row: str) -> dict[str, Any]:
    from benchmarks.cloud_scale.job import generate
    from committer.config import CommitterConfig

    sim.reset()
    storage = sim.trusted_options
    job = generate(sim, args.service, args.files, tasks, args.partitions,
                   f"j{uuid.uuid4().hex[:12]}", CommitterConfig(storage_options=storage))
    pairs = _pairs(job, tasks, args.partitions)
    sim.reset_stats()
    out: dict[str, Any] = {}
    if row.startswith("engine"):
        tuned = row == "engine-account-rate"
        # tuned: as cloud-scale --rate-limit builds it, the static cap at the account's rate
        config: dict[str, Any] = {"storage_options": storage}
        if tuned:
            config["io_rate_limit"] = int(args.ops_limit)
        trial = _child("cloud_scale/trial.py", {
            "config": config, "job": job.description(), "spark_defaults": not tuned})
        out = {"wall_s": trial["wall_s"], "cpu_s": trial["engine_cpu_s"],
               "peak_rss_mb": trial["peak_rss_mb"], "stages": trial["stages"],
               "stages_ms": trial["stages_ms"], "rate_limit": trial["rate_limit"],
               "how": (f"JobCommitter.commit, io.rate.limit {int(args.ops_limit):,}/s (the "
                       "account's limit)" if tuned
                       else "JobCommitter.commit, Spark's default configuration")}
    else:
        client, _, form = row.partition("-")
        params = {"client": client, "form": form or "gather", "service": args.service,
                  "storage_options": storage, "pairs": pairs,
                  "concurrency": args.obstore_concurrency if client == "obstore"
                  else args.pool_threads, "retries": args.obstore_retries}
        answer = _child("cloud_peers/clients.py", params)
        out = {"wall_s": answer["wall_s"], "cpu_s": answer["cpu_s"],
               "peak_rss_mb": answer["peak_rss_mb"], "how": _how(row, args)}
    stats = sim.stats()
    throttled = stats["throttled"]["bucket"] + stats["throttled"]["injected"]
    out.update(requests=stats["ops"] - throttled, throttled=throttled,
               requests_by_op=stats.get("by_op", {}),
               service_cpu_s=stats["cpu"]["total_s"], **_verify(sim, job, pairs))
    return out


def _how(row: str, args: argparse.Namespace) -> str:
    lib = "gcsfs" if args.service == "gcs" else "adlfs"
    if row == "fsspec-bulk":
        return f"{lib}: fs.mv(sources, destinations) (copies gathered, then one rm)"
    if row == "fsspec-pool":
        return f"{lib}: {args.pool_threads} threads of fs.mv(source, destination)"
    deletes = ("delete_async per file" if args.service == "gcs"
               else "delete_async of 256-name lists (Blob Batch)")
    retries = ("its own retries" if args.obstore_retries is None
               else f"max_retries {args.obstore_retries}, retry_timeout 10 min")
    return (f"obstore: copy_async gathered under a semaphore of {args.obstore_concurrency}, "
            f"then {deletes}; {retries}")


def _connector_row(sim: Any, args: argparse.Namespace, tasks: int, tuned: bool
                   ) -> dict[str, Any]:
    from benchmarks.cloud_peers.connectors import run_connector_peer
    from benchmarks.cloud_scale.job import SimJob

    if args.service == "gcs" and not getattr(args, "gcs_move", False):
        # the GCS connector renames by the objects move API and fails without it
        return {"skipped": "the GCS connector renames with the objects move API, which the "
                           "real service has: run with --gcs-move"}
    with tempfile.TemporaryDirectory(prefix="cloud-peers-connector-") as work:
        out = run_connector_peer(sim, args.service, args.files, tasks, args.partitions,
                                 tuned, Path(work))
    job = out.pop("job")
    # the same check as every other row's: the destination's keys, no source left
    check = SimJob(args.service, f"{'gs' if args.service == 'gcs' else 'abfs'}://data/table",
                   job.job_id, {}, job.files, job.expected)
    out.update(_verify(sim, check, job.pairs))
    if out.get("success_marker") is not True:
        out["destination_exact"] = False
    connector = ("the GCS connector" if args.service == "gcs" else
                 "hadoop-azure ABFS, " + ("Data Lake" if args.service == "adls"
                                          else "its Blob client"))
    out["how"] = (f"Spark's PathOutputCommitProtocol, {out['committer_factory'].rsplit('.', 1)[-1]}"
                  f" (Hadoop's ManifestCommitter) through {connector}, {out['configuration']}")
    return out


def _row_names(args: argparse.Namespace) -> list[str]:
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in ROWS]
    forms = [f.strip() for f in args.fsspec_forms.split(",") if f.strip()]
    bad_forms = [f for f in forms if f not in FSSPEC_FORMS]
    if unknown or bad_forms:
        raise SystemExit(f"cloud-peers: unknown rows {unknown} or fsspec forms {bad_forms}; "
                         f"rows: {', '.join(ROWS)}; forms: {', '.join(FSSPEC_FORMS)}")
    names: list[str] = []
    for r in wanted:
        names += [f"fsspec-{f}" for f in forms] if r == "fsspec" else [r]
    return names


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.cloud_scale.bound import machine_bound
    from committer.store.fanout import cpus
    from committer.testing.cloud_sim import start_cloud_sim

    tasks = args.tasks or max(1, args.files // 100)
    names = _row_names(args)
    rows: dict[str, dict[str, Any]] = {}
    with start_cloud_sim(service=args.service, latency_ms=args.latency_ms,
                         p99_ms=args.p99_ms if args.latency_ms else 0.0,
                         ops_limit=args.ops_limit, seed=21,
                         gcs_move=bool(getattr(args, "gcs_move", False))) as sim:
        runs = [(name, "" if k == 1 else f" #{k}")
                for k in range(1, max(1, getattr(args, "repeats", 1)) + 1)
                for name in (names if k % 2 else names[::-1])]  # alternated
        for name, suffix in runs:
            print(f"cloud-peers {args.service} {args.files:,}: {name}{suffix}", flush=True)
            load = os.getloadavg()[0]  # the machine is shared: each row says how busy it was
            t0 = time.perf_counter()
            try:
                if name.startswith("hadoop-"):
                    row = _connector_row(sim, args, tasks, tuned=name == "hadoop-tuned")
                else:
                    row = _sim_row(sim, args, tasks, name)
            except Exception as e:  # a peer that cannot run is reported, not fatal
                row = {"error": f"{type(e).__name__}: {e}"[:2000],
                       "traceback": traceback.format_exc()[-3000:]}
            row["row_s"] = time.perf_counter() - t0
            row["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
            rows[name + suffix] = row
    n = cpus()
    for key, row in rows.items():
        name, _, run = key.partition(" #")
        suffix = f" #{run}" if run else ""
        # each ratio against the engine's rows of the same pass
        engine_wall = rows.get("engine" + suffix, {}).get("wall_s")
        tuned_wall = rows.get("engine-account-rate" + suffix, {}).get("wall_s")
        wall = row.get("wall_s")
        if not wall:
            continue
        row["files_per_s"] = args.files / wall
        if engine_wall:
            row["vs_engine"] = wall / engine_wall
        if tuned_wall:
            row["vs_engine_account_rate"] = wall / tuned_wall
        account = (row.get("requests") or 0) / args.ops_limit if args.ops_limit else 0.0
        bound, term = machine_bound(account, float(row.get("cpu_s") or 0.0),
                                    float(row.get("service_cpu_s") or 0.0), n)
        if name.startswith("hadoop"):  # the committing process is a JVM
            term = term.replace("engine", "JVM")
        row.update(account_bound_s=account, machine_bound_s=bound, machine_bound_term=term,
                   held_by=_held_by(wall, bound, term))
    result = {"service": args.service, "files": args.files, "tasks": tasks,
              "partitions": args.partitions, "latency_ms": args.latency_ms,
              "p99_ms": args.p99_ms, "ops_limit": args.ops_limit, "cpus": n, "rows": rows,
              "targets": _targets(args.service, rows),
              "targets_by_pass": [_targets(args.service, rows, "" if k == 1 else f" #{k}")
                                  for k in range(1, max(1, getattr(args, "repeats", 1)) + 1)],
              "plot_dir": str(args.out) if getattr(args, "out", None) else None}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return result


#: a row whose wall is within this factor of its machine bound is held by that bound
_NEAR_BOUND = 1.5


def _held_by(wall: float, bound: float, term: str) -> str:
    """What held a row back: its machine bound's term (the account, the committing process's
    CPU, or that and the simulator's) when the wall is near it, else the chain of round trips
    its concurrency allows (requests waiting on the latency, not on a resource)."""
    if bound > 0 and wall <= _NEAR_BOUND * bound:
        return term
    return (f"latency chain ({wall / bound:.1f}x its machine bound, {term})" if bound > 0
            else "latency chain")


def _targets(service: str, rows: dict[str, dict[str, Any]], suffix: str = ""
             ) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, want in TARGETS.items():
        if name == "obstore" and service not in OBSTORE_TARGET_SERVICES:
            continue
        got = rows.get(name + suffix, {}).get("vs_engine")
        if got is not None:
            out[name] = {"at_least": want, "measured": got, "met": got >= want}
    return out


# -- report ----------------------------------------------------------------------------------

def _stage_list(stages: Any) -> list[tuple[str, float, float]]:
    """Stages as (name, start s, seconds): the engine's ``[name, end, took]`` list, or a
    mapping name -> seconds (one after another)."""
    out: list[tuple[str, float, float]] = []
    if isinstance(stages, dict):
        t = 0.0
        for name, value in stages.items():
            took = float(value) / (1000.0 if str(name).endswith("_ms") else 1.0)
            out.append((str(name), t, took))
            t += took
    elif isinstance(stages, list):
        for item in stages:
            if isinstance(item, dict):
                name, took = str(item.get("name")), float(item.get("seconds", 0.0))
                start = float(item.get("start_s", out[-1][1] + out[-1][2] if out else 0.0))
            else:
                name, end, took = str(item[0]), float(item[1]), float(item[2])
                start = end - took
            out.append((name, start, took))
    return out


def _last_line(text: str, limit: int = 300) -> str:
    """The line of an error that says what went wrong: the last that names an exception (a
    child's traceback ends with it, unless the text kept of it was cut short, as an obstore
    error's debug dump is), else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return (named[-1] if named else lines[-1] if lines else text)[:limit]


_EXCEPTION_LINE = re.compile(r"[\w.]*(Error|Exception|Exit|Interrupt)\b[^ ]*:")


def report(result: dict[str, Any]) -> str:
    from benchmarks.cloud_peers.plot import plot

    lines = [f"{result['service']}: {result['files']:,} files in {result['tasks']:,} tasks over "
             f"{result['partitions']} partitions; latency median {result['latency_ms']} ms, "
             f"p99 {result['p99_ms']} ms; account limit {result['ops_limit']:,.0f} requests/s;"
             f" {result['cpus']} CPUs", ""]
    table = []
    for name, row in result["rows"].items():
        if "wall_s" not in row or row.get("wall_s") is None:
            why = row.get("skipped") or "FAILED: " + _last_line(str(row.get("error")))
            table.append([name, why.replace("|", "/"), *[""] * 11])
            continue
        exact = row.get("destination_exact")
        table.append([
            name, f"{row['wall_s']:.1f}", f"{row['files_per_s']:,.0f}",
            f"{row.get('requests', 0):,}", f"{row.get('throttled', 0):,}",
            f"{row.get('cpu_s', 0):.1f}", f"{row.get('service_cpu_s', 0):.1f}",
            f"{row['machine_bound_s']:.1f}", row["held_by"],
            f"{row['vs_engine']:.2f}" if "vs_engine" in row else "",
            f"{row['vs_engine_account_rate']:.2f}" if "vs_engine_account_rate" in row else "",
            "yes" if exact else ("not reported" if exact is None else "NO"),
            "{:.1f} / {:.1f}".format(*row.get("load_1m", (0.0, 0.0))),
        ])
    lines.append(markdown_table(
        ["row", "wall s", "files/s", "requests", "throttled", "CPU s (committer)",
         "simulator CPU s", "machine bound s", "held by", "wall / engine's",
         "wall / engine-account-rate's",
         "destination exact", "load before / after"], table))
    lines.append("")
    lines += [f"- {name}: {row['how']}" for name, row in result["rows"].items() if "how" in row]
    targets = result.get("targets", {})
    if targets:
        lines.append("")
        lines.append("Targets (engine at least N times faster): " + "; ".join(
            f"{name} {t['at_least']}x: {t['measured']:.2f}x "
            f"{'met' if t['met'] else 'MISSED'}" for name, t in targets.items()))
    passes = result.get("targets_by_pass") or []
    if len(passes) > 1:
        for k, pass_targets in enumerate(passes, 1):
            lines.append(f"- pass {k}: " + "; ".join(
                f"{name} {t['measured']:.2f}x {'met' if t['met'] else 'MISSED'}"
                for name, t in pass_targets.items()))
    lines.append("")
    lines.append("What held each row back, and the requests the account served by operation:")
    lines.append("")
    for name, row in result["rows"].items():
        if row.get("held_by"):
            ops = ", ".join(f"{op} {n:,}" for op, n in
                            sorted((row.get("requests_by_op") or {}).items()))
            lines.append(f"- {name}: {row['held_by']}; {ops}")
    missed = [n for n, t in targets.items() if not t["met"]]
    if missed:
        for name in ["engine"] + [n for n in missed if n.startswith("hadoop")]:
            stages = _stage_list(result["rows"].get(name, {}).get("stages"))
            if stages:
                lines += ["", f"Stage timeline, {name} (start s, seconds):", "",
                          markdown_table(["stage", "start s", "seconds"],
                                         [[s, f"{a:.2f}", f"{b:.2f}"] for s, a, b in stages])]
    lines += plot_lines(plot, result)
    return "\n".join(lines)
