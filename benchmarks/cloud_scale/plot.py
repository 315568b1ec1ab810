"""The cloud-scale run over time: what the service served, what was in flight, what it refused,
and the engine's adaptive limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = result["timeline"].get("buckets", [])
    if not buckets:
        return []
    width = buckets[1]["t"] - buckets[0]["t"] if len(buckets) > 1 else 0.1
    t = [b["t"] for b in buckets]
    served = [b["responses_ops"] / width for b in buckets]
    throttled = [b["throttled_ops"] / width for b in buckets]
    in_flight = [b.get("mean_in_flight_ops", b.get("max_in_flight_ops", 0)) for b in buckets]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.plot(t, served, label="operations answered /s", linewidth=0.8)
    top.plot(t, throttled, label="throttled /s", linewidth=0.8, color="C3")
    ramp = result.get("ramp")
    if ramp:  # a cold GCS bucket: its write capacity as it ramped (model time, from start)
        history = [h for h in ramp["history"]["writes"] if h[0] >= ramp["t0"]]
        if history:
            top.plot([h[0] - ramp["t0"] for h in history], [h[1] for h in history],
                     label="bucket's write rate /s", linestyle="--", color="grey")
    elif result["ops_limit"]:
        top.axhline(result["ops_limit"], color="grey", linestyle="--",
                    label=f"account limit {result['ops_limit']:,.0f}/s")
    top.set_ylabel("per second")
    top.set_title(f"{result['service']}: {result['files']:,} files, latency median "
                  f"{result['latency_ms']} ms (as the simulated service saw it)")
    top.grid(True, alpha=0.3)
    top.legend(loc="upper right")
    bottom.plot(t, in_flight, label="requests in flight (service, mean per 100 ms)",
                linewidth=0.8)
    samples = result["trial"].get("limit_samples", [])
    paced = [s for s in samples if len(s) > 4 and s[4]]
    if paced:
        top.plot([s[0] for s in paced], [s[4] for s in paced], label="engine's pace /s",
                 linewidth=0.8, color="C2")
    if samples:
        # the trial's clock starts when it opens the store, the service's at the stats reset:
        # the same moment within the trial's start-up (about a second)
        bottom.plot([s[0] for s in samples], [s[1] for s in samples],
                    label="engine's adaptive limit", linewidth=0.8, color="C2")
    bottom.set_xlabel("seconds")
    bottom.set_ylabel("requests")
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="upper right")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / (f"cloud_scale_{result['service']}_{result['files']}"
                      f"{'_faults' if result['throttle_rate'] or result['lose_rate'] else ''}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
