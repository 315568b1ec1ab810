"""Helpers shared by every benchmark suite: statistics, trial subprocesses, results and report.

A *trial* is one timed piece of work run in a fresh interpreter (``python -m benchmarks.trial``),
so that its timing is not skewed by the garbage the parent accumulated while generating data,
and so that its peak RSS (``ru_maxrss``) is its own. The parent does the untimed set-up, starts
the trial, and reads one JSON object from its standard output.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results"


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


class CpuMeter:
    """CPU time over a timed part: this process's own user and system seconds, and the whole
    machine's (``/proc/stat``) split, including *steal*, the time the hypervisor gave our
    virtual CPUs to someone else. On a shared VM that split tells a slow trial that waited on
    the disk (iowait, idle) from one that was starved of CPU (steal) or burnt it in the kernel."""

    def __init__(self) -> None:
        self._proc = os.times()
        self._machine = self._read_machine()

    @staticmethod
    def _read_machine() -> list[int]:
        try:
            with open("/proc/stat") as f:
                fields = f.readline().split()[1 : 1 + len(_CPU_FIELDS)]
            return [int(x) for x in fields]
        except (OSError, ValueError):
            return []

    def read(self) -> dict[str, Any]:
        proc = os.times()
        machine = self._read_machine()
        tick = os.sysconf("SC_CLK_TCK")
        out: dict[str, Any] = {"process_user": round(proc.user - self._proc.user, 3),
                               "process_system": round(proc.system - self._proc.system, 3)}
        if machine and len(machine) == len(self._machine):
            out["machine"] = {name: round((b - a) / tick, 2) for name, a, b in
                              zip(_CPU_FIELDS, self._machine, machine, strict=False)}
        return out


def mib(n: float) -> float:
    return round(n / (1024 * 1024), 1)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and the spread ``(max - min) / median`` of a few repetitions."""
    if not values:
        return {"n": 0}
    med = statistics.median(values)
    return {
        "n": len(values),
        "median": med,
        "min": min(values),
        "max": max(values),
        "spread": (max(values) - min(values)) / med if med else 0.0,
    }


def run_trial(kind: str, params: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    """Run ``benchmarks.trial`` for ``kind`` in a fresh interpreter; return its JSON answer."""
    cmd = [sys.executable, "-m", "benchmarks.trial", kind, json.dumps(params)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"trial {kind} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def run_script(script: Path, params: dict[str, Any], timeout: float = 6 * 3600, *,
               code: Path = ROOT) -> dict[str, Any]:
    """Run ``script`` as a program in a fresh interpreter (its own directory first on the path,
    then ``code``, a checkout whose ``committer`` it imports, then this one), its parameters
    in a JSON file named by its one argument; return the JSON of its last output line."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(params, f)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(ROOT), os.environ.get(
        "PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, str(script), f.name], cwd=code, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed ({done.returncode}):\n{done.stderr[-5000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def log_tail(path: Path, limit: int = 4000) -> str:
    """What a failed child's log says: its exception lines (the last 20), else its end."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    lines = [x for x in text.splitlines() if "Exception" in x or "Error" in x or "Caused" in x]
    return ("\n".join(lines[-20:]) or text[-limit:])[-limit:]


def quiesce() -> None:
    """Flush dirty data and metadata from set-up so its write-back is not timed in the trial."""
    os.sync()
    time.sleep(0.5)


def machine() -> dict[str, Any]:
    """What the figures were measured on (they vary by +-30% run to run on a shared machine)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, check=False).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "committer"], cwd=ROOT,
                                    capture_output=True, text=True, check=False).stdout.strip())
    except OSError:
        commit, dirty = "", False
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git_commit": commit + ("+dirty" if dirty else ""),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def filesystem_of(path: str) -> str:
    """The filesystem type holding ``path`` (from /proc/mounts; longest matching mount)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mount = parts[1]
                if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(
                    mount
                ) > len(best):
                    best, kind = mount, parts[2]
    except OSError:
        pass
    return kind


# -- results ----------------------------------------------------------------------------------


def save_results(out_dir: Path, suite: str, result: dict[str, Any]) -> Path:
    """Write ``<suite>-<time>.json`` and ``<suite>-latest.json``; return the first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    path = out_dir / f"{suite}-{stamp}.json"
    path.write_bytes(data)
    (out_dir / f"{suite}-latest.json").write_bytes(data)
    return path


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def plot_lines(plot: Callable[[dict[str, Any], Path], Sequence[Path]],
               result: dict[str, Any]) -> list[str]:
    """The report's lines linking the suite's plots, drawn into the run's ``--out`` directory
    (``result["plot_dir"]``) or ``benchmarks/results``; a line saying so without matplotlib."""
    out_dir = Path(result.get("plot_dir") or ROOT / "benchmarks" / "results")
    try:
        return [""] + [f"![{p.stem}]({p})" for p in plot(result, out_dir)]
    except ImportError:
        return ["(matplotlib missing: no plot)"]


def write_report(out_dir: Path, sections: Sequence[tuple[str, str]]) -> Path:
    """``report.md``: one section per suite run, as the suites rendered them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.md"
    parts = ["# Benchmark report", "", "```", json.dumps(machine(), indent=2), "```", ""]
    for title, body in sections:
        parts += [f"## {title}", "", body.rstrip(), ""]
    path.write_text("\n".join(parts))
    return path
