"""Run the emulator benchmark: every (emulator, scenario, mode, concurrency) on a fresh emulator.

Both emulators are single processes bound by their own CPU that slow down as a bucket fills, so
every run starts a new emulator, prepares exactly the scenario's objects, times one commit in
a fresh interpreter and measures the emulator's CPU seconds over that commit (psutil). Ratios
are only ever taken between runs of the same scenario, so at the same object count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import ROOT, machine, mib
from benchmarks.emulators.scenario import Scenario, prepare
from committer.config import CommitterConfig
from committer.store import open_store
from committer.testing.emulators import RunningEmulator, azurite, fake_gcs_server

EMULATORS: dict[str, Callable[[], AbstractContextManager[RunningEmulator]]] = {
    "azurite": azurite,
    "gcs": fake_gcs_server,
}
SEQUENTIAL = ("naive", "v1")
TRIAL_TIMEOUT_S = 3600


@dataclass
class RunSpec:
    emulator: str
    scenario: Scenario
    mode: str
    concurrency: int  # 1 for the sequential modes


@dataclass
class RunResult:
    emulator: str
    scenario: str
    files: int
    mode: str
    concurrency: int
    seconds: float
    files_per_s: float
    emulator_cpu_s: float
    client_cpu_s: float
    peak_rss_mib: float
    base_rss_mib: float
    prepare_s: float


def plan(emulators: Sequence[str], scenarios: Sequence[Scenario], modes: Sequence[str],
         concurrency: Sequence[int], sequential_max: int) -> list[RunSpec]:
    runs: list[RunSpec] = []
    for emu in emulators:
        for sc in scenarios:
            for mode in modes:
                if mode in SEQUENTIAL:
                    if sc.files <= sequential_max:
                        runs.append(RunSpec(emu, sc, mode, 1))
                    continue
                runs.extend(RunSpec(emu, sc, mode, c) for c in concurrency)
    return runs


def _emulator_cpu(pid: int) -> float:
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):  # node may run its server in a child
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return float(total)


def _count_output(root: str, options: dict[str, Any], dest: str) -> int:
    store = open_store(root, CommitterConfig(storage_options=options))
    try:
        # data files only: names starting with "_" are the committers' own (Hadoop's rule)
        return sum(1 for st in store.walk_files(dest)
                   if not st.path[len(dest) + 1:].startswith("_"))
    finally:
        store.backend.close()


def run_one(spec: RunSpec) -> RunResult:
    with EMULATORS[spec.emulator]() as emu:
        root = emu.url(f"bench{uuid.uuid4().hex[:10]}")
        options = dict(emu.storage_options)
        t0 = time.perf_counter()
        job = prepare(root, options, spec.scenario)
        prepare_s = time.perf_counter() - t0
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"mode": spec.mode, "kind": spec.emulator, "options": options,
                       "job": job.to_json(), "concurrency": spec.concurrency}, f)
            params = Path(f.name)
        try:
            cpu0 = _emulator_cpu(emu.pid)
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.emulators.trial", str(params)], cwd=ROOT,
                capture_output=True, text=True, timeout=TRIAL_TIMEOUT_S, check=False)
            emu_cpu = _emulator_cpu(emu.pid) - cpu0
        finally:
            params.unlink()
        if proc.returncode != 0:
            raise RuntimeError(f"{spec.mode} on {spec.emulator} failed:\n{proc.stderr[-3000:]}")
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        found = _count_output(root, options, job.dest)
        if found != spec.scenario.files:  # every mode must really have moved every file
            raise RuntimeError(f"{spec.mode} on {spec.emulator}: {found} files in the "
                               f"destination, expected {spec.scenario.files}")
    seconds = float(answer["seconds"])
    return RunResult(spec.emulator, spec.scenario.label, spec.scenario.files, spec.mode,
                     spec.concurrency, seconds, spec.scenario.files / seconds, emu_cpu,
                     float(answer["client_cpu_s"]), mib(answer["peak_rss"]),
                     mib(answer["base_rss"]), prepare_s)


def run_all(runs: Sequence[RunSpec], progress: bool = True) -> Iterator[RunResult]:
    if not progress:
        for spec in runs:
            yield run_one(spec)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("emulator benchmark", total=len(runs))
        for spec in runs:
            bar.update(task, description=(f"{spec.emulator} {spec.scenario.files} files "
                                          f"{spec.mode} c={spec.concurrency}"))
            result = run_one(spec)
            bar.console.log(f"{result.emulator:8} {result.files:6} {result.mode:9} "
                            f"c={result.concurrency:<4} {result.files_per_s:8.1f} files/s "
                            f"emulator cpu {result.emulator_cpu_s:6.1f}s")
            yield result
            bar.advance(task)


def results_document(results: Sequence[RunResult], settings: dict[str, Any]) -> dict[str, Any]:
    return {"suite": "emulators", "machine": machine(), "settings": settings,
            "runs": [asdict(r) for r in results]}
