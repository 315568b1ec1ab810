"""Markdown report and PNG plots from the emulator benchmark's JSON results."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import markdown_table

TARGET_RATIO = 0.8
MODE_LABELS = {"committer": "this committer", "raw": "raw ceiling", "naive": "naive mv loop",
               "v1": "v1-style commit"}


def _best(runs: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Best run (highest files/s over the concurrency sweep) per (emulator, files, mode)."""
    best: dict[tuple[str, int, str], dict[str, Any]] = {}
    for r in runs:
        key = (r["emulator"], r["files"], r["mode"])
        if key not in best or r["files_per_s"] > best[key]["files_per_s"]:
            best[key] = r
    return best


def summary_rows(runs: list[dict[str, Any]]) -> list[list[Any]]:
    best = _best(runs)
    rows: list[list[Any]] = []
    for emu, files in sorted({(r["emulator"], r["files"]) for r in runs}):
        ours, raw = best.get((emu, files, "committer")), best.get((emu, files, "raw"))
        naive, v1 = best.get((emu, files, "naive")), best.get((emu, files, "v1"))

        def fps(r: dict[str, Any] | None) -> str:
            return "-" if r is None else f"{r['files_per_s']:,.1f} ({r['emulator_cpu_s']:.1f}s)"

        ratio = (ours["files_per_s"] / raw["files_per_s"]) if ours and raw else None
        rows.append([
            emu, files, fps(ours), fps(raw),
            "-" if ratio is None else f"{ratio:.2f} {'✅' if ratio >= TARGET_RATIO else '❌'}",
            fps(naive),
            "-" if not (ours and naive) else f"{ours['files_per_s'] / naive['files_per_s']:.1f}x",
            fps(v1),
            "-" if not (ours and v1) else f"{ours['files_per_s'] / v1['files_per_s']:.1f}x",
        ])
    return rows


def render_markdown(doc: dict[str, Any], plots: list[Path]) -> str:
    runs = doc["runs"]
    lines = [
        "# Emulator benchmark: job commit on Azurite and fake-gcs-server",
        "",
        f"Measured {doc['machine']['time']} on {doc['machine']['cpus']} CPUs "
        f"(load {doc['machine']['load_average']}), commit {doc['machine']['git_commit']}.",
        f"Command: `{doc['settings']['command']}`",
        "",
        "Every run starts a fresh emulator, writes exactly the scenario's objects and commits "
        "their tasks (untimed), then times one job commit in a fresh interpreter. Both "
        "emulators are single CPU-bound processes that slow down as a bucket fills, so ratios "
        "compare runs at the same object count only; the emulator's own CPU seconds during "
        "the timed commit are shown in brackets beside each figure.",
        "",
        "- *this committer*: `JobCommitter.commit()` (manifests, directories, renames, "
        "`_SUCCESS`, cleanup), best over the concurrency sweep;",
        "- *raw ceiling*: only the rename requests (copy + delete) issued directly on one "
        "event loop, nothing read, checked or retried, best over the same sweep;",
        "- *naive mv loop*: `for src, dst in pairs: fs.mv(src, dst)` with adlfs / gcsfs;",
        "- *v1-style commit*: FileOutputCommitter v1's job commit done sequentially "
        "(tree walk per task, rename per file, `_SUCCESS`, delete `_temporary`).",
        "",
        "## Summary (files per second, emulator CPU seconds in brackets)",
        "",
        markdown_table(
            ["emulator", "files", "this committer", "raw ceiling",
             f"ratio (target >= {TARGET_RATIO})", "naive mv loop", "speed-up vs naive",
             "v1-style", "speed-up vs v1"],
            summary_rows(runs)),
        "",
        "## Every run",
        "",
        markdown_table(
            ["emulator", "scenario", "files", "mode", "concurrency", "seconds", "files/s",
             "emulator CPU s", "client CPU s", "client peak RSS MiB"],
            [[r["emulator"], r["scenario"], r["files"], r["mode"], r["concurrency"],
              round(r["seconds"], 2), round(r["files_per_s"], 1), round(r["emulator_cpu_s"], 1),
              round(r["client_cpu_s"], 1), r["peak_rss_mib"]]
             for r in sorted(runs, key=lambda r: (r["emulator"], r["files"], r["mode"],
                                                  r["concurrency"]))]),
        "",
    ]
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}]({p.name})" for p in plots]
        lines.append("")
    return "\n".join(lines)


def plot(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = doc["runs"]
    emulators = sorted({r["emulator"] for r in runs})
    best = _best(runs)
    paths: list[Path] = []

    fig, axes = plt.subplots(1, len(emulators), figsize=(6 * len(emulators), 4), squeeze=False)
    for ax, emu in zip(axes[0], emulators, strict=True):
        for mode, label in MODE_LABELS.items():
            pts = sorted((f, r["files_per_s"]) for (e, f, m), r in best.items()
                         if e == emu and m == mode)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_title(f"{emu}: throughput vs file count")
        ax.set_xlabel("files in the job")
        ax.set_ylabel("files committed per second")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
    paths.append(_save(fig, out_dir / "throughput_vs_files.png"))

    fig, axes = plt.subplots(1, len(emulators), figsize=(6 * len(emulators), 4), squeeze=False)
    for ax, emu in zip(axes[0], emulators, strict=True):
        series: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
        for r in runs:
            if r["emulator"] == emu and r["mode"] in ("committer", "raw"):
                series[(r["mode"], r["files"])].append((r["concurrency"], r["files_per_s"]))
        for (mode, files), pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    linestyle="-" if mode == "committer" else "--",
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
            pts = sorted((r["files"], r["peak_rss_mib"]) for r in runs
                         if r["emulator"] == emu and r["mode"] == mode)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_title(f"{emu}: client peak memory")
        ax.set_xlabel("files in the job")
        ax.set_ylabel("peak RSS of the committing process (MiB)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    paths.append(_save(fig, out_dir / "peak_memory.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
