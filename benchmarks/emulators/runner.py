"""Run the emulator benchmark: every (emulator, scenario, repetition, mode, concurrency) on a
fresh emulator.

Both emulators are single processes bound by their own CPU that slow down as a bucket fills, so
every run starts a new emulator, prepares exactly the scenario's objects, times one commit in
a fresh interpreter and measures over that commit the emulator's CPU seconds (psutil) and the
seconds its threads were runnable but waiting for a CPU (``/proc/<pid>/task/*/schedstat``): on
a shared machine that wait, not the client, is what stretches a run whose emulator CPU is far
below its wall time. Ratios are only ever taken between runs of the same scenario and the same
repetition, so at the same object count and close together in time.

Every emulator started is stopped when its run ends, fails or is interrupted (the context
managers of ``committer.testing.emulators``; ``__main__`` turns SIGTERM and SIGHUP into the
same interruption as Ctrl-C), and ``run_one`` checks that it really exited.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
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
from committer.store import azure as _azure  # noqa: F401  (imported now: see code_snapshot)
from committer.store import gcs as _gcs  # noqa: F401
from committer.store import open_store
from committer.testing.emulators import (
    EmulatorError,
    RunningEmulator,
    azurite,
    fake_gcs_server,
)

EMULATORS: dict[str, Callable[[], AbstractContextManager[RunningEmulator]]] = {
    "azurite": azurite,
    "gcs": fake_gcs_server,
}
SEQUENTIAL = ("naive", "v1")
TRIAL_TIMEOUT_S = 3600


START_ATTEMPTS = 3  # a free port can be taken between choosing it and the emulator binding it


@dataclass
class RunSpec:
    emulator: str
    scenario: Scenario
    mode: str
    concurrency: int  # 1 for the sequential modes
    repeat: int = 0


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
    # defaults: results of the harness before repetitions can still be --include'd
    repeat: int = 0
    emulator_wait_s: float | None = None  # emulator threads runnable, waiting for a CPU
    load_1m: float | None = None  # machine load average when the timed commit started
    started_at: float | None = None  # time.time() when the timed commit started
    # "VmHWM": the trial's own peak; None: ru_maxrss, which was the harness's (see trial.py)
    peak_rss_source: str | None = None


def plan(emulators: Sequence[str], scenarios: Sequence[Scenario], modes: Sequence[str],
         concurrency: Sequence[int], sequential_max: int, repeats: int = 1,
         sequential_repeats: int = 1,
         concurrency_at: dict[int, list[int]] | None = None) -> list[RunSpec]:
    """Every run, in the order they are made: per scenario and emulator, ``repeats``
    repetitions; each repetition runs the modes (and the concurrency sweep) in the given order,
    the next one in reverse, and so on, so neither mode always runs first. The sequential
    modes (naive, v1) run in the first ``sequential_repeats`` repetitions only.
    ``concurrency_at`` replaces the sweep for the scenarios of the given file counts."""
    runs: list[RunSpec] = []
    for sc in scenarios:  # file count outermost: an interrupted matrix has both emulators
        for emu in emulators:
            for rep in range(repeats):
                forward = rep % 2 == 0
                for mode in (modes if forward else list(reversed(modes))):
                    if mode in SEQUENTIAL:
                        if sc.files <= sequential_max and rep < sequential_repeats:
                            runs.append(RunSpec(emu, sc, mode, 1, rep))
                        continue
                    levels = (concurrency_at or {}).get(sc.files, list(concurrency))
                    sweep = levels if forward else list(reversed(levels))
                    runs.extend(RunSpec(emu, sc, mode, c, rep) for c in sweep)
    return runs


def _processes(pid: int) -> list[int]:
    """The pid and the pids of every descendant (node may run its server in a child)."""
    pids = [pid]
    with contextlib.suppress(psutil.NoSuchProcess):
        pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
    return pids


def _emulator_wait(pid: int) -> float:
    """Seconds the emulator's threads have spent runnable but not running (waiting for a CPU),
    summed over its threads: the second field of ``/proc/<pid>/task/<tid>/schedstat``."""
    total = 0
    for p in _processes(pid):
        for stat in Path(f"/proc/{p}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(stat.read_text().split()[1])
    return total / 1e9


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


def enter_emulator(stack: contextlib.ExitStack[Any], kind: str) -> RunningEmulator:
    """Start an emulator whose stop ``stack`` owns; tried again if it could not start (its
    port taken by another process between choosing it and binding it). An emulator that fails
    to start is stopped by ``committer.testing.emulators`` before it raises."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return stack.enter_context(EMULATORS[kind]())
        except EmulatorError:
            if attempt == START_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


_SNAPSHOT_PACKAGES = ("committer", "manifest_schema", "benchmarks")
_SNAPSHOT_CHECK = ("import committer.job, committer.store.azure, committer.store.gcs, "
                   "benchmarks.emulators.trial")


@contextlib.contextmanager
def code_snapshot(attempts: int = 5) -> Iterator[Path]:
    """A private copy of the packages the timed trials import, taken once at the start.

    Other work goes on in the same working tree while a matrix runs for tens of minutes; the
    trials (fresh interpreters) import from this copy, so every run of a matrix measures the
    same engine code, and a file saved half-way through someone's edit cannot break a run.
    The copy must import cleanly; if it does not (an edit in progress), it is taken again.
    This process (the untimed set-up) imported the backends when it started, at the same
    moment."""
    with tempfile.TemporaryDirectory(prefix="emulator-bench-code-") as tmp:
        code = Path(tmp)
        for attempt in range(1, attempts + 1):
            for name in _SNAPSHOT_PACKAGES:
                shutil.rmtree(code / name, ignore_errors=True)
                shutil.copytree(ROOT / name, code / name,
                                ignore=shutil.ignore_patterns("__pycache__", "results"))
            check = subprocess.run([sys.executable, "-c", _SNAPSHOT_CHECK], cwd=code,
                                   capture_output=True, text=True, check=False)
            if check.returncode == 0:
                break
            if attempt == attempts:
                raise RuntimeError(f"the engine code does not import:\n{check.stderr[-2000:]}")
            time.sleep(10)
        yield code


def code_digest(code: Path) -> str:
    """A digest of the engine code in a snapshot (``committer`` and ``manifest_schema``)."""
    h = hashlib.sha256()
    for name in ("committer", "manifest_schema"):
        for f in sorted((code / name).rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(code)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def run_one(spec: RunSpec, code: Path = ROOT) -> RunResult:
    """One run; the trial imports the packages under ``code`` (see ``code_snapshot``)."""
    with contextlib.ExitStack() as stack:
        emu = enter_emulator(stack, spec.emulator)
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
            load, started_at = os.getloadavg()[0], time.time()
            cpu0, wait0 = _emulator_cpu(emu.pid), _emulator_wait(emu.pid)
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.emulators.trial", str(params)], cwd=code,
                capture_output=True, text=True, timeout=TRIAL_TIMEOUT_S, check=False)
            emu_cpu = _emulator_cpu(emu.pid) - cpu0
            emu_wait = _emulator_wait(emu.pid) - wait0
        finally:
            params.unlink()
        if proc.returncode != 0:
            raise RuntimeError(f"{spec.mode} on {spec.emulator} failed:\n{proc.stderr[-3000:]}")
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        found = _count_output(root, options, job.dest)
        if found != spec.scenario.files:  # every mode must really have moved every file
            raise RuntimeError(f"{spec.mode} on {spec.emulator}: {found} files in the "
                               f"destination, expected {spec.scenario.files}")
    if emu.process.poll() is None:  # stop() waits for the exit; never leave one running
        raise RuntimeError(f"{spec.emulator} (pid {emu.pid}) still running after stop")
    seconds = float(answer["seconds"])
    return RunResult(spec.emulator, spec.scenario.label, spec.scenario.files, spec.mode,
                     spec.concurrency, seconds, spec.scenario.files / seconds, emu_cpu,
                     float(answer["client_cpu_s"]), mib(answer["peak_rss"]),
                     mib(answer["base_rss"]), prepare_s, spec.repeat, round(emu_wait, 3),
                     round(load, 2), round(started_at, 1), answer.get("peak_rss_source"))


def run_all(runs: Sequence[RunSpec], progress: bool = True,
            code: Path = ROOT) -> Iterator[RunResult]:
    if not progress:
        for spec in runs:
            yield run_one(spec, code)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("emulator benchmark", total=len(runs))
        for spec in runs:
            bar.update(task, description=(f"{spec.emulator} {spec.scenario.files} files "
                                          f"rep {spec.repeat + 1} {spec.mode} "
                                          f"c={spec.concurrency}"))
            result = run_one(spec, code)
            bar.console.log(f"{result.emulator:8} {result.files:6} r{result.repeat + 1} "
                            f"{result.mode:9} c={result.concurrency:<4} "
                            f"{result.files_per_s:8.1f} files/s in {result.seconds:6.1f}s, "
                            f"emulator cpu {result.emulator_cpu_s:6.1f}s "
                            f"wait {result.emulator_wait_s:5.1f}s, load {result.load_1m:.1f}")
            yield result
            bar.advance(task)


def results_document(results: Sequence[RunResult], settings: dict[str, Any]) -> dict[str, Any]:
    return {"suite": "emulators", "machine": machine(), "settings": settings,
            "runs": [asdict(r) for r in results]}
