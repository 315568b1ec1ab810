"""Markdown report and PNG plots from the emulator benchmark's JSON results.

Ratios are taken per repetition: in repetition *r* at *N* files, this committer's best run over
the concurrency sweep against the raw ceiling's best run over the same sweep in that same
repetition (the two ran back to back on fresh emulators with the same objects). The summary
gives the median and the min-max of those ratios, and the medians of the per-repetition best
files per second; the speed-ups over the naive loop and the v1-style commit divide the medians.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table

TARGET_RATIO = 0.8
MODE_LABELS = {"committer": "this committer", "raw": "raw ceiling", "naive": "naive mv loop",
               "v1": "v1-style commit"}

Run = dict[str, Any]
Key = tuple[str, int, str, int]  # emulator, files, mode, repetition


def _rep(r: Run) -> int:
    return int(r.get("repeat") or 0)


def best_per_repeat(runs: Sequence[Run]) -> dict[Key, Run]:
    """The best run (highest files/s over the concurrency sweep) per (emulator, files, mode,
    repetition)."""
    best: dict[Key, Run] = {}
    for r in runs:
        key = (r["emulator"], r["files"], r["mode"], _rep(r))
        if key not in best or r["files_per_s"] > best[key]["files_per_s"]:
            best[key] = r
    return best


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def summary(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One entry per (emulator, files): per-repetition ratios and the medians."""
    best = best_per_repeat(runs)
    out: list[dict[str, Any]] = []
    for emu, files in sorted({(r["emulator"], r["files"]) for r in runs}):
        per_mode: dict[str, list[Run]] = {
            mode: [best[k] for k in sorted(best) if k[:3] == (emu, files, mode)]
            for mode in MODE_LABELS}
        reps = sorted({_rep(r) for r in per_mode["committer"]} & {_rep(r) for r in per_mode["raw"]})
        ratios = [best[(emu, files, "committer", rep)]["files_per_s"]
                  / best[(emu, files, "raw", rep)]["files_per_s"] for rep in reps]
        entry: dict[str, Any] = {"emulator": emu, "files": files, "paired_repeats": len(reps),
                                 "ratios": [round(x, 3) for x in ratios]}
        if ratios:
            entry.update(ratio_median=statistics.median(ratios), ratio_min=min(ratios),
                         ratio_max=max(ratios),
                         meets_target=statistics.median(ratios) >= TARGET_RATIO)
        for mode, rs in per_mode.items():
            fps = [r["files_per_s"] for r in rs]
            entry[mode] = None if not rs else {
                "repeats": len(rs),
                "files_per_s_median": _median(fps), "files_per_s_min": min(fps),
                "files_per_s_max": max(fps),
                "emulator_cpu_s_median": _median([r["emulator_cpu_s"] for r in rs]),
                "best_concurrency": [r["concurrency"] for r in rs],
            }
        ours = entry["committer"]
        for mode in ("naive", "v1"):
            other = entry[mode]
            entry[f"speedup_vs_{mode}"] = (
                ours["files_per_s_median"] / other["files_per_s_median"]
                if ours and other else None)
        out.append(entry)
    return out


def _fps_cell(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "-"
    med, lo, hi = (stats["files_per_s_median"], stats["files_per_s_min"],
                   stats["files_per_s_max"])
    spread = f" ({lo:,.0f}-{hi:,.0f})" if stats["repeats"] > 1 else ""
    return f"{med:,.0f}{spread} · {stats['emulator_cpu_s_median']:.1f}s"


def _concurrency_cell(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "-"
    counts: dict[int, int] = defaultdict(int)
    for c in stats["best_concurrency"]:
        counts[c] += 1
    return ", ".join(f"{c}" + (f" x{n}" if n > 1 else "") for c, n in sorted(counts.items()))


def summary_rows(runs: Sequence[Run]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for s in summary(runs):
        if "ratio_median" in s:
            verdict = "✅" if s["meets_target"] else "❌"
            ratio = f"**{s['ratio_median']:.2f}**" + (
                f" ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})" if s["paired_repeats"] > 1
                else "")
        else:
            verdict, ratio = "-", "-"
        rows.append([
            s["emulator"], s["files"], s["paired_repeats"], _fps_cell(s["committer"]),
            _fps_cell(s["raw"]), ratio, verdict, _fps_cell(s["naive"]),
            "-" if s["speedup_vs_naive"] is None else f"{s['speedup_vs_naive']:.1f}x",
            _fps_cell(s["v1"]),
            "-" if s["speedup_vs_v1"] is None else f"{s['speedup_vs_v1']:.1f}x",
            f"{_concurrency_cell(s['committer'])} / {_concurrency_cell(s['raw'])}",
        ])
    return rows


def _opt(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _rss(r: Run) -> str:
    """The trial's peak RSS, or "-" for results whose figure was the harness's (trial.py)."""
    return f"{r['peak_rss_mib']:.1f}" if r.get("peak_rss_source") == "VmHWM" else "-"


def _pair(ours: Run, raw: Run, field: str) -> str:
    return f"{_opt(ours.get(field), '.1f')} / {_opt(raw.get(field), '.1f')}"


def repeat_rows(runs: Sequence[Run]) -> list[list[Any]]:
    """One row per (emulator, files, repetition) with both the committer and the raw ceiling."""
    best = best_per_repeat(runs)
    first_started: dict[Key, float] = {}
    for r in runs:
        key = (r["emulator"], r["files"], r["mode"], _rep(r))
        t = r.get("started_at")
        if t is not None:
            first_started[key] = min(first_started.get(key, t), t)
    rows: list[list[Any]] = []
    for emu, files, mode, rep in sorted(best):
        if mode != "committer" or (emu, files, "raw", rep) not in best:
            continue
        ours, raw = best[(emu, files, "committer", rep)], best[(emu, files, "raw", rep)]
        t_ours = first_started.get((emu, files, "committer", rep))
        t_raw = first_started.get((emu, files, "raw", rep))
        order = "-" if t_ours is None or t_raw is None else (
            "committer first" if t_ours < t_raw else "raw first")
        rows.append([
            emu, files, rep + 1, order,
            f"{ours['files_per_s']:,.1f} (c={ours['concurrency']})",
            f"{raw['files_per_s']:,.1f} (c={raw['concurrency']})",
            f"{ours['files_per_s'] / raw['files_per_s']:.2f}",
            f"{ours['emulator_cpu_s']:.1f} / {raw['emulator_cpu_s']:.1f}",
            _pair(ours, raw, "emulator_wait_s"),
            _pair(ours, raw, "load_1m"),
        ])
    return rows


def _code_lines(settings: dict[str, Any]) -> list[str]:
    tree = settings.get("committer_tree")
    if not tree:
        return []
    files = tree.get("uncommitted_files") or []
    text = (f"Engine code measured: commit {tree['head']}"
            + (f" plus uncommitted changes (in progress in the shared tree) to {len(files)} "
               f"files under `committer/`" if files else ", no uncommitted changes"))
    if settings.get("code_sha256"):
        text += (f"; the trials ran a copy taken at the start (digest "
                 f"`{settings['code_sha256']}`), so every run measured the same code")
    return [text + "."]


def render_markdown(doc: dict[str, Any], plots: list[Path], image_dir: str = "") -> str:
    """The report; ``image_dir`` is prefixed to the plot file names in image links."""
    runs = doc["runs"]
    settings = doc["settings"]
    loads = [r["load_1m"] for r in runs if r.get("load_1m") is not None]
    load_text = (f"; load average (1 min) at the start of the timed commits: median "
                 f"{statistics.median(loads):.1f}, {min(loads):.1f}-{max(loads):.1f}"
                 if loads else "")
    wall = settings.get("wall_s")
    lines = [
        "# Emulator benchmark: job commit on Azurite and fake-gcs-server",
        "",
        f"Measured {doc['machine']['time']} on {doc['machine']['cpus']} CPUs "
        f"(load {doc['machine']['load_average']} at the end{load_text}), "
        f"commit {doc['machine']['git_commit']}"
        + (f", {wall / 60:.1f} minutes for the whole matrix." if wall else "."),
        f"Command: `{settings['command']}`",
        *_code_lines(settings),
        "",
        "Every run starts a fresh emulator, writes exactly the scenario's objects and commits "
        "their tasks (untimed), then times one job commit in a fresh interpreter. Both "
        "emulators are CPU-bound (Azurite on one Node event loop, fake-gcs-server in Go on "
        "more than one CPU) and slow down as a bucket fills, so ratios compare runs at the "
        "same object count only. Each (emulator, file count) is measured "
        f"in {settings.get('repeats', 1)} repetition(s) (naive and v1: "
        f"{settings.get('sequential_repeats', 1)}); a repetition runs every mode and "
        "concurrency once, the next one in the reverse order. The ratio is taken per "
        "repetition (this committer's best over the concurrency sweep / the raw ceiling's best "
        "over the same sweep in the same repetition); the summary gives its median and "
        "min-max, and the medians of the per-repetition best files/s (min-max in brackets), "
        "with the emulator's median CPU seconds during the timed commit after the dot.",
        "",
        "- *this committer*: `JobCommitter.commit()` (manifests, directories, renames, "
        "`_SUCCESS`, cleanup);",
        "- *raw ceiling*: only the rename requests (copy, then delete) issued directly on one "
        "event loop exactly as the committer's backend issues them, on the committer's own "
        "lean HTTP client (`committer/store/http`: the same signing, requests and batches, a "
        "connection pool above the concurrency, a pending copy polled, a request the "
        "emulator's reset connection lost sent again), with no committer logic: nothing read, "
        "checked, or retried for any other failure;",
        "- *naive mv loop*: `for src, dst in pairs: fs.mv(src, dst)` with adlfs / gcsfs;",
        "- *v1-style commit*: FileOutputCommitter v1's job commit done sequentially "
        "(tree walk per task, rename per file, `_SUCCESS`, delete `_temporary`).",
        "",
        "*Emulator CPU wait* is the time the emulator's threads were runnable but had no CPU "
        "(`/proc/<pid>/task/*/schedstat`, summed over its threads) during the timed commit. "
        "On Azurite (requests served on one event-loop thread; the sum includes its helper "
        "threads) a run whose wall time far exceeds the emulator's CPU time shows a large "
        "wait: on a shared machine the wait, not the client, is what stretches a run. On "
        "fake-gcs-server the sum over its many threads is not wall time.",
        "",
        "## Summary (median files per second, min-max in brackets, emulator CPU s after the dot)",
        "",
        markdown_table(
            ["emulator", "files", "paired reps", "this committer", "raw ceiling",
             "ratio: median (min-max)", f"target >= {TARGET_RATIO}", "naive mv loop",
             "speed-up vs naive", "v1-style", "speed-up vs v1",
             "best concurrency (committer / raw)"],
            summary_rows(runs)),
        "",
        "## Per repetition",
        "",
        markdown_table(
            ["emulator", "files", "rep", "order", "this committer files/s (best c)",
             "raw ceiling files/s (best c)", "ratio", "emulator CPU s (ours / raw)",
             "emulator CPU wait s (ours / raw)", "load 1m (ours / raw)"],
            repeat_rows(runs)),
        "",
        "## Every run",
        "",
        markdown_table(
            ["emulator", "files", "rep", "mode", "concurrency", "seconds", "files/s",
             "emulator CPU s", "emulator CPU wait s", "load 1m", "client CPU s",
             "client peak RSS MiB"],
            [[r["emulator"], r["files"], _rep(r) + 1, r["mode"], r["concurrency"],
              round(r["seconds"], 2), round(r["files_per_s"], 1), round(r["emulator_cpu_s"], 1),
              _opt(r.get("emulator_wait_s"), ".1f"), _opt(r.get("load_1m"), ".1f"),
              round(r["client_cpu_s"], 1), _rss(r)]
             for r in sorted(runs, key=lambda r: (r["emulator"], r["files"], _rep(r),
                                                  r["mode"], r["concurrency"]))]),
        "",
    ]
    if any(r.get("peak_rss_source") != "VmHWM" for r in runs):
        lines += ["Client peak RSS \"-\": measured as `ru_maxrss`, which Linux carries over "
                  "`execve` from the harness that started the trial, so it was the harness's "
                  "size, not the commit's (fixed in `trial.py`: `VmHWM`).", ""]
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}]({image_dir}{p.name})" for p in plots]
        lines.append("")
    return "\n".join(lines)


def _errorbar(ax: Any, pts: list[tuple[int, list[float]]], **kw: Any) -> None:
    """Median with a min-max bar at each x."""
    pts.sort()
    xs = [x for x, _ in pts]
    med = [statistics.median(v) for _, v in pts]
    lo = [m - min(v) for m, (_, v) in zip(med, pts, strict=True)]
    hi = [max(v) - m for m, (_, v) in zip(med, pts, strict=True)]
    ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, **kw)


def plot(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = doc["runs"]
    emulators = sorted({r["emulator"] for r in runs})
    best = best_per_repeat(runs)
    paths: list[Path] = []

    fig, axes = plt.subplots(1, len(emulators), figsize=(6 * len(emulators), 4), squeeze=False)
    for ax, emu in zip(axes[0], emulators, strict=True):
        for mode, label in MODE_LABELS.items():
            per_files: dict[int, list[float]] = defaultdict(list)
            for (e, f, m, _), r in best.items():
                if e == emu and m == mode:
                    per_files[f].append(r["files_per_s"])
            if per_files:
                _errorbar(ax, list(per_files.items()), label=label)
        ax.set_title(f"{emu}: throughput vs file count (median, min-max)")
        ax.set_xlabel("files in the job")
        ax.set_ylabel("files committed per second")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
    paths.append(_save(fig, out_dir / "throughput_vs_files.png"))

    fig, axes = plt.subplots(1, len(emulators), figsize=(6 * len(emulators), 4), squeeze=False)
    for ax, emu in zip(axes[0], emulators, strict=True):
        ratios = [(s["files"], s["ratios"]) for s in summary(runs)
                  if s["emulator"] == emu and s["ratios"]]
        if ratios:
            _errorbar(ax, ratios, color="C0", label="ratio")
        ax.axhline(TARGET_RATIO, color="C3", linestyle="--", label=f"target {TARGET_RATIO}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"{emu}: this committer / raw ceiling, per repetition")
        ax.set_xlabel("files in the job")
        ax.set_ylabel("ratio of files/s (median, min-max)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    paths.append(_save(fig, out_dir / "ratio_vs_files.png"))

    fig, axes = plt.subplots(1, len(emulators), figsize=(6 * len(emulators), 4), squeeze=False)
    for ax, emu in zip(axes[0], emulators, strict=True):
        series: dict[tuple[str, int], dict[int, list[float]]] = defaultdict(
            lambda: defaultdict(list))
        for r in runs:
            if r["emulator"] == emu and r["mode"] in ("committer", "raw"):
                series[(r["mode"], r["files"])][r["concurrency"]].append(r["files_per_s"])
        counts = sorted({files for _, files in series})
        for (mode, files), pts in sorted(series.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            _errorbar(ax, list(pts.items()), linestyle="-" if mode == "committer" else "--",
                      color=f"C{counts.index(files)}",
                      label=f"{MODE_LABELS[mode]}, {files} files")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{emu}: throughput vs requests in flight")
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("files committed per second")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    paths.append(_save(fig, out_dir / "throughput_vs_concurrency.png"))

    fig, axes = plt.subplots(1, len(emulators), figsize=(6 * len(emulators), 4), squeeze=False)
    for ax, emu in zip(axes[0], emulators, strict=True):
        for mode, label in MODE_LABELS.items():
            rss: dict[int, list[float]] = defaultdict(list)
            for r in runs:
                if (r["emulator"] == emu and r["mode"] == mode
                        and r.get("peak_rss_source") == "VmHWM"):
                    rss[r["files"]].append(r["peak_rss_mib"])
            if rss:
                _errorbar(ax, list(rss.items()), label=label)
        ax.set_title(f"{emu}: client peak memory")
        ax.set_xlabel("files in the job")
        ax.set_ylabel("peak RSS of the committing process (MiB)")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    if any(r.get("peak_rss_source") == "VmHWM" for r in runs):
        paths.append(_save(fig, out_dir / "peak_memory.png"))
    else:  # no valid figure (results of the harness before the VmHWM fix): no plot
        plt.close(fig)
        (out_dir / "peak_memory.png").unlink(missing_ok=True)
    return paths


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
