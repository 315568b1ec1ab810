"""Job commit on local disk against the ceiling of the same work done with bare ``os`` calls.

The job: ``--tasks`` tasks x ``--files-per-task`` empty files, each task writing into all of
``--partitions`` partitions (default 1,000 x 100 into 100: 100,000 files, and 100,000
directories in the task trees). Each trial gets a freshly generated job (untimed) and runs in
its own interpreter; see ``benchmarks/trial.py`` for exactly what is timed.

- **ceiling**: renames plus the removal of the emptied task trees with ``os.rename`` and
  ``os.rmdir``, paths known in advance; serially, and by N threads each taking its own share of
  the tasks, for each N of ``--ceiling-threads``; and (``Nr``) the same with the calls
  relative to open directories, as the engine's own local loop makes them, so that trick is
  not what beats the ceiling.
- **ours**: the whole ``JobCommitter.commit()``.
- **ours, no etags** (``--etag-less``): the same, on a job whose manifests give no file an etag
  (as Hadoop's task committer writes them), so job commit first records the sources' identities.

Each repetition runs every trial once, in an order rotated from one repetition to the next
(with as many repetitions as trials, each trial takes every position once), so slow phases of a
shared machine hit all of them alike. The ceiling is the variant that is fastest over the run
(highest median files per second); the ratio is computed per repetition (ours / that variant
in the same repetition) and reported as median and spread. Taking instead the fastest variant
of each repetition picks the luckiest of several noisy trials against one trial of ours (on a
disk whose speed wanders by +-25% from trial to trial, that alone is worth 10%); that figure is
reported too, as ``ratio_best_per_repetition``, with the ratio of the two medians.

Every trial records CPU time (its process's user and system seconds, the machine's steal); one
during which the hypervisor took more than ``--max-steal`` of the machine's CPU time is run
again on a fresh job (at most ``--steal-retries`` times, the attempt with the least steal kept).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from statistics import median
from typing import Any

from benchmarks.common import markdown_table, mib, quiesce, run_trial, summarize
from benchmarks.jobtree import Shape, generate, remove, verify_committed

NAME = "local-commit"
TITLE = "Job commit on local disk vs the os-call ceiling"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--files-per-task", type=int, default=100)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3,
                   help="repetitions; as many as there are trials balances their order fully")
    p.add_argument("--ceiling-threads", default="0,2,16,32,64,32r",
                   help="comma-separated thread counts of the ceiling; 0 is serial; a trailing "
                        "'r' makes the calls relative to open directories (as the engine's)")
    p.add_argument("--io-threads", type=int, default=None,
                   help="io_threads of our commit (default: the engine's default)")
    p.add_argument("--compare-baseline", action="store_true",
                   help="also time the engine as it was before its local-disk tuning")
    p.add_argument("--max-steal", type=float, default=0.1,
                   help="run a trial again when the hypervisor took more than this fraction "
                        "of the machine's CPU time during it (steal; 0: never)")
    p.add_argument("--steal-retries", type=int, default=2,
                   help="at most this many re-runs of one trial for steal")
    p.add_argument("--etag-less", action="store_true",
                   help="also run ours on the job with manifests carrying no etags")
    p.add_argument("--workdir", default=None,
                   help="directory on the disk to measure (default: a new one under /tmp)")


def _trial(shape: Shape, kind: str, params: dict[str, Any], max_steal: float = 0.0,
           retries: int = 0) -> dict[str, Any]:
    """One trial on a freshly generated job. With ``max_steal``, a trial during which the
    hypervisor took more than that fraction of the machine's CPU time (steal) is run again, up
    to ``retries`` times, and the attempt with the least steal is kept: the work is CPU-bound
    (mostly kernel time), so a trial that lost a fifth of its CPUs measures the neighbours.
    The rule looks at steal only, never at the result, and applies to every trial alike; the
    steal of each discarded attempt is kept in ``steal_reruns``."""
    attempts: list[dict[str, Any]] = []
    while True:
        remove(shape)
        t0 = time.perf_counter()
        generate(shape)
        setup = time.perf_counter() - t0
        quiesce()
        result = run_trial(kind, {"shape": shape.to_json(), **params})
        verify_committed(shape)
        remove(shape)
        result["setup_seconds"] = setup
        result["files_per_second"] = shape.files / result["elapsed"]
        result["steal_fraction"] = steal_fraction(result)
        attempts.append(result)
        if max_steal <= 0 or result["steal_fraction"] <= max_steal or len(attempts) > retries:
            break
    kept = min(attempts, key=lambda r: r["steal_fraction"])
    kept["steal_reruns"] = [round(r["steal_fraction"], 3) for r in attempts if r is not kept]
    return kept


def steal_fraction(result: dict[str, Any]) -> float:
    """The share of the machine's CPU time the hypervisor took during a trial."""
    steal = result.get("cpu", {}).get("machine", {}).get("steal", 0.0)
    return float(steal) / ((os.cpu_count() or 1) * float(result["elapsed"]))


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-local-", dir="/tmp")
    os.makedirs(workdir, exist_ok=True)
    shape = Shape(os.path.join(workdir, "dest"), args.tasks, args.files_per_task,
                  args.partitions)
    variants = [t.strip() for t in str(args.ceiling_threads).split(",") if t.strip()]
    config: dict[str, Any] = {}
    if args.io_threads:
        config["io_threads"] = args.io_threads
    reps: list[dict[str, Any]] = []
    retry = (args.max_steal, args.steal_retries)
    try:
        for rep in range(args.repeats):
            order = _rotation(["ours", *(["before"] if args.compare_baseline else []),
                               *(["no-etags"] if args.etag_less else []), *variants], rep)
            ceiling: dict[str, dict[str, Any]] = {}
            ours: dict[str, Any] = {}
            before: dict[str, Any] | None = None
            no_etags: dict[str, Any] | None = None
            for part in order:
                if part == "ours":
                    ours = _trial(shape, "ours", {"config": config}, *retry)
                    _log(args, rep, "ours", ours)
                elif part == "before":
                    before = _trial(shape, "ours", {"config": config, "baseline": True}, *retry)
                    _log(args, rep, "ours (engine before tuning)", before)
                elif part == "no-etags":
                    no_etags = _trial(dataclasses.replace(shape, etags=False), "ours",
                                      {"config": config}, *retry)
                    _log(args, rep, "ours, manifests without etags", no_etags)
                else:
                    relative = part.endswith("r")
                    threads = int(part.rstrip("r"))
                    r = _trial(shape, "ceiling", {"threads": threads, "relative": relative},
                               *retry)
                    ceiling[_variant_name(part)] = r
                    _log(args, rep, f"ceiling {_variant_name(part)}", r)
            ceiling = {_variant_name(v): ceiling[_variant_name(v)] for v in variants}
            best_name = max(ceiling, key=lambda k: ceiling[k]["files_per_second"])
            best = ceiling[best_name]["files_per_second"]
            reps.append({
                "order": [p if p in ("ours", "before", "no-etags") else _variant_name(p)
                          for p in order],
                "ceiling": ceiling,
                "ceiling_best": best_name,
                "ours": ours,
                "ratio_best_per_repetition": ours["files_per_second"] / best,
                "before": before,
                "no_etags": no_etags,
            })
    finally:
        remove(shape)
    fastest = _fastest_variant(reps)
    for r in reps:
        chosen = r["ceiling"][fastest]["files_per_second"]
        r["ceiling_files_per_second"] = chosen
        r["ratio"] = r["ours"]["files_per_second"] / chosen
        r["ratio_before"] = r["before"]["files_per_second"] / chosen if r["before"] else None
        r["ratio_no_etags"] = (r["no_etags"]["files_per_second"] / chosen
                               if r.get("no_etags") else None)
    return {
        "suite": NAME,
        "shape": {"tasks": shape.tasks, "files_per_task": shape.files_per_task,
                  "partitions": shape.partitions, "files": shape.files,
                  "task_directories": shape.tasks * min(shape.partitions, shape.files_per_task)},
        "workdir": workdir,
        "config": config,
        "max_steal": args.max_steal,
        "steal_retries": args.steal_retries,
        "repetitions": reps,
        "ceiling_variant": fastest,
        "ratio": summarize([r["ratio"] for r in reps]),
        "ratio_best_per_repetition": summarize([r["ratio_best_per_repetition"] for r in reps]),
        "ours_files_per_second": summarize([r["ours"]["files_per_second"] for r in reps]),
        "ceiling_files_per_second": summarize([r["ceiling_files_per_second"] for r in reps]),
        "ratio_of_medians": (median(r["ours"]["files_per_second"] for r in reps)
                             / median(r["ceiling_files_per_second"] for r in reps)),
        "ratio_before": summarize([r["ratio_before"] for r in reps if r["before"]]),
        "ratio_no_etags": summarize([r["ratio_no_etags"] for r in reps if r["no_etags"]]),
        "target_ratio": 0.9,
    }


def _variant_name(variant: str) -> str:
    threads = int(variant.rstrip("r"))
    name = "serial" if threads == 0 else f"threads-{threads}"
    return name + ("-relative" if variant.endswith("r") else "")


def _rotation(trials: list[str], rep: int) -> list[str]:
    """The order of repetition ``rep``: ``trials`` rotated by ``rep``, so over as many
    repetitions as there are trials each takes every position once. Trials late in a
    repetition ran measurably slower on the shared disk (set-up times grow along it too), so a
    fixed order would favour whatever runs early."""
    k = rep % len(trials)
    return trials[k:] + trials[:k]


def _fastest_variant(reps: list[dict[str, Any]]) -> str:
    """The ceiling variant with the highest median files per second over the repetitions."""
    names: list[str] = list(reps[0]["ceiling"])
    return max(names, key=lambda k: median(r["ceiling"][k]["files_per_second"] for r in reps))


def _log(args: argparse.Namespace, rep: int, what: str, r: dict[str, Any]) -> None:
    if getattr(args, "quiet", False):
        return
    reruns = r.get("steal_reruns") or []
    again = f"; run again for steal {', '.join(f'{x:.0%}' for x in reruns)}" if reruns else ""
    print(f"  [{NAME} rep {rep + 1}] {what}: {r['files_per_second']:,.0f} files/s "
          f"({r['elapsed']:.2f} s; {_cpu_text(r)}; set-up {r['setup_seconds']:.0f} s{again})",
          flush=True)


def _cpu_text(r: dict[str, Any]) -> str:
    """CPU seconds of the trial's process (user / system) and the machine's steal."""
    cpu = r.get("cpu", {})
    steal = cpu.get("machine", {}).get("steal")
    return (f"cpu {cpu.get('process_user', 0):.2f} / {cpu.get('process_system', 0):.2f}"
            + (f", steal {steal:.2f}" if steal is not None else ""))


def _steal_text(result: dict[str, Any]) -> str:
    trials = [t for r in result["repetitions"]
              for t in [r["ours"], *r["ceiling"].values(), *([r["before"]] if r["before"] else []),
                        *([r["no_etags"]] if r.get("no_etags") else [])]]
    reruns = sum(len(t.get("steal_reruns", [])) for t in trials)
    limit = result.get("max_steal") or 0
    if not limit:
        return "Trials were not re-run for steal."
    worst = max((t.get("steal_fraction", 0.0) for t in trials), default=0.0)
    return (f"Trials during which steal exceeded {limit:.0%} of the machine's CPU time were run "
            f"again (at most {result.get('steal_retries', 2)} times, keeping the attempt with "
            f"the least steal): {reruns} re-runs over {len(trials)} trials; the highest steal "
            f"of a kept trial was {worst:.0%}.")


def report(result: dict[str, Any]) -> str:
    s = result["shape"]
    lines = [
        f"{s['files']:,} files ({s['tasks']:,} tasks x {s['files_per_task']} files, "
        f"{s['partitions']} partitions; {s['task_directories']:,} task directories), "
        f"{len(result['repetitions'])} repetitions, the order of the trials rotated.",
        "",
    ]
    rows = []
    for i, r in enumerate(result["repetitions"], 1):
        variants = ", ".join(f"{k} {v['files_per_second']:,.0f}" for k, v in r["ceiling"].items())
        stages = r["ours"].get("stages", {})
        stage_text = " / ".join(f"{v:.2f}" for v in stages.values())
        chosen = r["ceiling"][result["ceiling_variant"]]
        rows.append([i, f"{r['order'].index('ours') + 1} of {len(r['order'])}", variants,
                     r["ceiling_best"],
                     round(r["ours"]["files_per_second"]), stage_text,
                     _cpu_text(r["ours"]), _cpu_text(chosen),
                     f"{r['ratio']:.2f}", f"{r['ratio_best_per_repetition']:.2f}"])
    lines.append(markdown_table(
        ["rep", "ours ran", "ceiling files/s by variant", "fastest this rep", "ours files/s",
         "ours stages s (load / mkdirs / rename / cleanup)",
         "ours CPU s", f"{result['ceiling_variant']} CPU s",
         f"ratio vs {result['ceiling_variant']}", "ratio vs fastest this rep"], rows))
    ratio, lucky = result["ratio"], result["ratio_best_per_repetition"]
    lines += [
        "",
        f"Ceiling: {result['ceiling_variant']}, the variant with the highest median over the "
        "repetitions.",
        f"**Ratio ours / ceiling: median {ratio['median']:.2f}** (min {ratio['min']:.2f}, "
        f"max {ratio['max']:.2f}); target >= {result['target_ratio']}. Against the fastest "
        f"variant of each repetition instead: median {lucky['median']:.2f} "
        f"(min {lucky['min']:.2f}, max {lucky['max']:.2f}).",
        f"Ours: median {result['ours_files_per_second']['median']:,.0f} files/s; ceiling: "
        f"median {result['ceiling_files_per_second']['median']:,.0f} files/s (ratio of the "
        f"medians {result['ratio_of_medians']:.2f}).",
        "CPU: user / system seconds of the trial's process, and the seconds the hypervisor "
        "took from this machine's CPUs (steal) during it; the work is mostly kernel time on "
        "both sides.",
        *([f"Engine before tuning, same run: median ratio "
           f"{result['ratio_before']['median']:.2f}, files/s "
           + ", ".join(f"{r['before']['files_per_second']:,.0f}"
                       for r in result["repetitions"]) + "."]
          if result["ratio_before"].get("n") else []),
        *([f"Ours on manifests without etags (identities recorded at planning), same run: "
           f"median ratio {result['ratio_no_etags']['median']:.2f} "
           f"(min {result['ratio_no_etags']['min']:.2f}, "
           f"max {result['ratio_no_etags']['max']:.2f}), files/s "
           + ", ".join(f"{r['no_etags']['files_per_second']:,.0f}"
                       for r in result["repetitions"]) + "; stages s (load / mkdirs / rename / "
           "cleanup) " + "; ".join(" / ".join(f"{v:.2f}" for v in
                                               r["no_etags"].get("stages", {}).values())
                                      for r in result["repetitions"]) + "."]
          if result.get("ratio_no_etags", {}).get("n") else []),
        _steal_text(result),
        "Peak RSS of our commit process: "
        + ", ".join(f"{mib(r['ours']['peak_rss'])} MiB" for r in result["repetitions"]) + ".",
    ]
    return "\n".join(lines)
