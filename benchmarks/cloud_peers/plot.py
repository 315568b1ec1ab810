"""The cloud-peers run: each row's wall and requests, and the stage timelines of this engine
and of Hadoop's committer where both have them."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.cloud_peers import _stage_list

    rows = {n: r for n, r in result["rows"].items() if r.get("wall_s")}
    if not rows:
        return []
    timelines = {n: _stage_list(rows[n].get("stages")) for n in rows
                 if n == "engine" or n.startswith("hadoop")}
    timelines = {n: s for n, s in timelines.items() if s}
    fig, axes = plt.subplots(2 if timelines else 1, 1, figsize=(10, 7 if timelines else 4))
    top = axes[0] if timelines else axes
    names = list(rows)
    top.barh(names, [rows[n]["wall_s"] for n in names], color="C0")
    for i, n in enumerate(names):
        top.text(rows[n]["wall_s"], i, f" {rows[n]['wall_s']:.1f} s, "
                 f"{rows[n].get('requests', 0):,} requests", va="center", fontsize=8)
    top.invert_yaxis()
    walls = [rows[n]["wall_s"] for n in names]
    if max(walls) > 20 * min(walls):  # one slow row would flatten the others
        top.set_xscale("log")
    top.set_xlabel("wall seconds")
    top.set_title(f"{result['service']}: {result['files']:,} files, latency median "
                  f"{result['latency_ms']} ms, limit {result['ops_limit']:,.0f}/s")
    top.grid(True, axis="x", alpha=0.3)
    if timelines:
        bottom = axes[1]
        y = 0
        labels = []
        for name, stages in timelines.items():
            for j, (stage, start, took) in enumerate(stages):
                bottom.broken_barh([(start, max(took, 1e-3))], (y - 0.4, 0.8),
                                   color=f"C{j % 10}")
                labels.append(f"{name}: {stage}")
                y += 1
        bottom.set_yticks(range(len(labels)), labels, fontsize=7)
        bottom.invert_yaxis()
        bottom.set_xlabel("seconds since the commit began")
        bottom.set_title("stage timelines")
        bottom.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"cloud_peers_{result['service']}_{result['files']}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
