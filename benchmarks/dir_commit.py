"""Job commit where each task owns a new partition (``repartition(col)``), and the standard job.

Layouts (``--layouts``, each ``TASKSxFILES`` with ``own`` or ``shared<P>``):

- ``200x500own``: 200 tasks x 500 empty files, task ``t`` writing all of them into its own new
  partition ``p=<t>`` (the layout of issue 15);
- ``1000x100own``: the same with 1,000 tasks x 100 files;
- ``1000x100shared100``: the standard job of ``local-commit`` (every task writes into the same
  100 partitions), which must not get slower.

Trials, each on a freshly generated job in its own process (``benchmarks/trial.py``):

- **ours**: ``JobCommitter.commit()`` (the directory fast path on, the default);
- **ours-per-file**: the same with ``rename.directories=false`` (the engine before the fast
  path, for the same layout);
- **ours-no-etags** (``--etag-less``): ours on the same job whose manifests give no file an
  etag (Hadoop's task committer writes none), so job commit identifies every source first;
- **ceiling**: every file renamed with ``os.rename`` and the emptied task trees removed, by
  ``--ceiling-threads`` threads (the per-file ceiling of ``local-commit``);
- **dir-ceiling** (own layouts): each task's partition renamed whole with ``os.rename``;
- **floor** (own layouts): only what the issue's rules make any such commit do, nothing else:
  parse every manifest (one thread), then one ``fstatat`` per file on as many threads as CPUs
  (the proof that a directory holds exactly its files); reported with its two parts;
- **hadoop-manifest** / **hadoop-v1** (skip with ``--no-hadoop``): Hadoop's ManifestCommitter
  and FileOutputCommitter v1 ``commitJob`` from pyspark's jars (``hadoop-local``'s set-up: JVM
  start and a warm-up job untimed).

Repetitions rotate the order of the trials; every ratio is computed within one repetition and
reported as median, min and max. The load average is recorded before and after each layout.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import tempfile
import time
from statistics import median
from typing import Any

from benchmarks.common import markdown_table, quiesce, run_trial, summarize
from benchmarks.hadoop_v1 import generate_v1
from benchmarks.jobtree import Shape, generate, remove, verify_committed

NAME = "dir-commit"
TITLE = "Job commit of one new partition per task (directory fast path) vs ceilings and Hadoop"
DEFAULT_LAYOUTS = "200x500own,1000x100own,1000x100shared100"
_LAYOUT = re.compile(r"^(\d+)x(\d+)(own|shared(\d+))$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    existing = {a.dest for a in p._actions}
    p.add_argument("--layouts", default=DEFAULT_LAYOUTS,
                   help="comma-separated TASKSxFILES{own|sharedP} (default: %(default)s)")
    p.add_argument("--no-hadoop", action="store_true",
                   help="skip Hadoop's ManifestCommitter and FileOutputCommitter v1 trials")
    p.add_argument("--dir-repeats", type=int, default=3)
    if "ceiling_threads" not in existing:
        p.add_argument("--ceiling-threads", default="0,2,16,32,64,32r")
    if "workdir" not in existing:
        p.add_argument("--workdir", default=None)
    if "etag_less" not in existing:
        p.add_argument("--etag-less", action="store_true",
                       help="also run ours on the job with manifests carrying no etags")


def parse_layout(text: str, dest: str) -> Shape:
    m = _LAYOUT.match(text.strip())
    if m is None:
        raise SystemExit(f"bad layout {text!r}: expected TASKSxFILES{{own|sharedP}}")
    tasks, files = int(m.group(1)), int(m.group(2))
    if m.group(3) == "own":
        return Shape(dest, tasks, files, partitions=1, own_partitions=True)
    return Shape(dest, tasks, files, partitions=int(m.group(4)))


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def _trial(shape: Shape, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    if params.get("etags") is False:  # the same job, its manifests without etags (Hadoop's)
        shape = dataclasses.replace(shape, etags=False)
        params = {k: v for k, v in params.items() if k != "etags"}
    remove(shape)
    job = Shape(**{**shape.to_json(), "hadoop_naming": True}) if kind == "hadoop-manifest" \
        else shape
    t0 = time.perf_counter()
    if kind == "hadoop-v1":
        generate_v1(shape)
    else:
        generate(job)
    setup = time.perf_counter() - t0
    quiesce()
    result = run_trial(kind, {"shape": job.to_json(), **params})
    if kind not in ("hadoop-v1", "floor"):
        verify_committed(job)
    if kind in ("ours", "hadoop-manifest", "hadoop-v1") \
            and result.get("files_committed") != shape.files:
        raise AssertionError(f"{kind}: {result.get('files_committed')} files committed, "
                             f"expected {shape.files}")
    remove(shape)
    result["setup_seconds"] = setup
    result["files_per_second"] = shape.files / result["elapsed"]
    return result


def _trials(shape: Shape, args: argparse.Namespace) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {
        "ours": ("ours", {"config": {}}),
        "ours-per-file": ("ours", {"config": {"rename_directories": False}}),
    }
    if getattr(args, "etag_less", False):
        out["ours-no-etags"] = ("ours", {"config": {}, "etags": False})
    for raw in str(args.ceiling_threads).split(","):
        v = raw.strip()
        if v:
            out[f"ceiling-{v}"] = ("ceiling", {"threads": int(v.rstrip("r")),
                                               "relative": v.endswith("r")})
    if shape.own_partitions:
        out["dir-ceiling-0"] = ("dir-ceiling", {"threads": 0})
        out["dir-ceiling-2"] = ("dir-ceiling", {"threads": 2})
        out["floor"] = ("floor", {"threads": os.cpu_count() or 1})
    if not args.no_hadoop:
        out["hadoop-manifest"] = ("hadoop-manifest", {})
        out["hadoop-v1"] = ("hadoop-v1", {})
    return out


def run_layout(shape: Shape, args: argparse.Namespace) -> dict[str, Any]:
    trials = _trials(shape, args)
    names = list(trials)
    reps: list[dict[str, dict[str, Any]]] = []
    load_before = load_average()
    for rep in range(args.dir_repeats):
        k = rep % len(names)
        order = names[k:] + names[:k]
        results: dict[str, dict[str, Any]] = {}
        for name in order:
            kind, params = trials[name]
            results[name] = _trial(shape, kind, params)
            if not getattr(args, "quiet", False):
                r = results[name]
                extra = (f", {r.get('directories_moved')} dirs moved, "
                         f"{r.get('file_renames')} file renames" if kind == "ours" else "")
                print(f"  [{NAME} {_layout_name(shape)} rep {rep + 1}] {name}: "
                      f"{r['elapsed']:.3f} s ({r['files_per_second']:,.0f} files/s{extra})",
                      flush=True)
        reps.append(results)
    load_after = load_average()

    def fastest(prefix: str) -> str | None:
        cands = [n for n in names if n.startswith(prefix)]
        if not cands:
            return None
        return min(cands, key=lambda n: median(r[n]["elapsed"] for r in reps))

    ceiling, dir_ceiling = fastest("ceiling-"), fastest("dir-ceiling-")
    ratios: dict[str, Any] = {}

    def per_rep(a: str, b: str) -> dict[str, float]:
        """elapsed(b) / elapsed(a) per repetition: how many times faster ``a`` is than b."""
        return summarize([r[b]["elapsed"] / r[a]["elapsed"] for r in reps])

    if ceiling:
        ratios["ours_speedup_vs_file_ceiling"] = per_rep("ours", ceiling)
        ratios["per_file_engine_vs_file_ceiling"] = per_rep("ours-per-file", ceiling)
    if dir_ceiling:
        ratios["ours_vs_dir_ceiling"] = per_rep("ours", dir_ceiling)
    if "hadoop-manifest" in names:
        ratios["ours_speedup_vs_hadoop_manifest"] = per_rep("ours", "hadoop-manifest")
        ratios["ours_speedup_vs_v1"] = per_rep("ours", "hadoop-v1")
    ratios["ours_speedup_vs_ours_per_file"] = per_rep("ours", "ours-per-file")
    if "ours-no-etags" in names:
        ratios["no_etags_vs_ours"] = per_rep("ours", "ours-no-etags")
        if ceiling:
            ratios["no_etags_speedup_vs_file_ceiling"] = per_rep("ours-no-etags", ceiling)
    return {
        "layout": _layout_name(shape),
        "shape": shape.to_json(),
        "files": shape.files,
        "ceiling_variant": ceiling,
        "dir_ceiling_variant": dir_ceiling,
        "elapsed": {n: summarize([r[n]["elapsed"] for r in reps]) for n in names},
        "ratios": ratios,
        "repetitions": reps,
        "load_average_before": load_before,
        "load_average_after": load_after,
    }


def _layout_name(shape: Shape) -> str:
    kind = "own" if shape.own_partitions else f"shared{shape.partitions}"
    return f"{shape.tasks}x{shape.files_per_task}{kind}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-dir-", dir="/tmp")
    os.makedirs(workdir, exist_ok=True)
    dest = os.path.join(workdir, "dest")
    layouts = []
    try:
        for text in str(args.layouts).split(","):
            if text.strip():
                layouts.append(run_layout(parse_layout(text, dest), args))
    finally:
        remove(Shape(dest))
    return {"suite": NAME, "workdir": workdir, "repeats": args.dir_repeats, "layouts": layouts}


def _fmt(s: dict[str, float] | None) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def _floor_cell(lay: dict[str, Any]) -> str:
    reps = [r["floor"] for r in lay["repetitions"] if "floor" in r]
    if not reps:
        return "-"
    parse = median(r["parse_seconds"] for r in reps)
    proof = median(r["proof_seconds"] for r in reps)
    return f"{_fmt(lay['elapsed']['floor'])} ({parse:.2f} + {proof:.2f})"


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['repeats']} repetitions per layout, trial order rotated; each ratio "
             "computed within a repetition: median (min-max). \"x faster\" = elapsed of the "
             "other / elapsed of ours.", ""]
    rows = []
    for lay in result["layouts"]:
        el = lay["elapsed"]
        r = lay["ratios"]
        rows.append([
            lay["layout"], f"{lay['files']:,}",
            _fmt(el["ours"]), _fmt(el["ours-per-file"]),
            f"{lay['ceiling_variant']}: {_fmt(el[lay['ceiling_variant']])}",
            (f"{lay['dir_ceiling_variant']}: {_fmt(el[lay['dir_ceiling_variant']])}"
             if lay["dir_ceiling_variant"] else "-"),
            _fmt(el.get("hadoop-manifest")), _fmt(el.get("hadoop-v1")),
            _floor_cell(lay),
            _fmt(r.get("ours_speedup_vs_file_ceiling")),
            _fmt(r.get("ours_speedup_vs_v1")),
            _fmt(r.get("ours_speedup_vs_hadoop_manifest")),
            " / ".join(f"{x:.2f}" for x in lay["load_average_before"]),
            _fmt(el.get("ours-no-etags")),
            _fmt(r.get("no_etags_speedup_vs_file_ceiling")),
            _fmt(r.get("no_etags_vs_ours")),
        ])
    lines.append(markdown_table(
        ["layout", "files", "ours s", "ours per-file s", "per-file os ceiling s",
         "directory os ceiling s", "Hadoop ManifestCommitter s", "FileOutputCommitter v1 s",
         "floor s (parse + proof)",
         "ours x faster than per-file ceiling", "x faster than v1",
         "x faster than ManifestCommitter", "load avg before",
         "ours, no etags s", "no etags x faster than per-file ceiling",
         "no etags / ours (elapsed)"], rows))
    lines += [
        "",
        "\"ours, no etags\": the same job with manifests that give no file an etag (as Hadoop's "
        "task committer writes them), so job commit identifies every source first "
        "(`--etag-less`); \"no etags / ours\" is its elapsed over ours' in the same "
        "repetition (target <= 1.1).",
        "Targets: own-partition layouts >= 5x faster than the per-file ceiling and no slower "
        "than v1 (x >= 1); the shared layout >= 0.9x its ceiling (x >= 0.9) and >= 2x "
        "ManifestCommitter.",
    ]
    return "\n".join(lines)
