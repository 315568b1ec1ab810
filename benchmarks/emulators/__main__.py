"""``python -m benchmarks.emulators [--emulators azurite,gcs] [--files 1000,2000,5000] ...``

Examples:
    python -m benchmarks.emulators                          # the full default matrix
    python -m benchmarks.emulators --quick                  # 500 files, one repetition
    python -m benchmarks.emulators --scenario 10x100x4x1024 --modes committer,raw
    python -m benchmarks.emulators --files 200 --repeats 1  # a smoke test, about a minute

Each (emulator, file count) is measured ``--repeats`` times (the naive and v1 modes
``--sequential-repeats`` times), the order of the modes alternating between repetitions; the
committer / raw-ceiling ratio is taken per repetition and reported as median and min-max.
Ctrl-C, SIGTERM and SIGHUP stop the run and every emulator it started; the runs finished so far
are in ``emulators-partial.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT, ROOT, save_results
from benchmarks.emulators.modes import MODES
from benchmarks.emulators.report import plot, render_markdown, summary
from benchmarks.emulators.runner import (
    EMULATORS,
    RunResult,
    code_digest,
    code_snapshot,
    plan,
    results_document,
    run_all,
)
from benchmarks.emulators.scenario import Scenario


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str, allowed: tuple[str, ...] | list[str]) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {list(allowed)}")
    return names


def _files_levels(text: str) -> tuple[int, list[int]]:
    files, sep, levels = text.partition(":")
    if not sep or not _ints(levels):
        raise argparse.ArgumentTypeError("expected FILES:C1,C2 such as 5000:16")
    return int(files), _ints(levels)


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` as Ctrl-C does, so that the emulator
    context managers and ``subprocess.run`` (which kills the trial) clean up; a second signal
    while cleaning up is ignored, so the clean-up cannot itself be cut short."""
    def interrupt(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, interrupt)
                for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def committer_tree() -> dict[str, Any]:
    """What engine code was measured: the commit, and a digest of the uncommitted changes to
    ``committer/`` (other work may be in progress in the same tree)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout

    diff = git("diff", "HEAD", "--", "committer")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", "committer")
    changed = git("diff", "HEAD", "--name-only", "--", "committer").split()
    return {"head": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted_files": changed + untracked.split(),
            "uncommitted_sha256": hashlib.sha256((diff + untracked).encode()).hexdigest()[:16]
            if diff or untracked else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.emulators", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--emulators", default="azurite,gcs",
                   type=lambda s: _names(s, list(EMULATORS)))
    p.add_argument("--files", default="1000,2000,5000", type=_ints,
                   help="total files per job (tasks of up to 200 files)")
    p.add_argument("--scenario", action="append", default=[],
                   help="TASKSxFILESxPARTITIONSxSIZE, instead of --files (repeatable)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--size", type=int, default=1024, help="bytes per file")
    p.add_argument("--modes", default=",".join(MODES), type=lambda s: _names(s, MODES))
    p.add_argument("--concurrency", default="16,64", type=_ints,
                   help="requests in flight, swept for this committer and the raw ceiling "
                        "(256 was never better than 16 or 64 on the emulators)")
    p.add_argument("--concurrency-at", action="append", default=[], type=_files_levels,
                   metavar="FILES:C1,C2",
                   help="a different sweep at one file count, e.g. 5000:16 (repeatable): "
                        "large jobs are slow on the emulators")
    p.add_argument("--sequential-max", type=int, default=5000,
                   help="skip the naive and v1 modes above this many files (they are slow)")
    p.add_argument("--repeats", type=_positive, default=3,
                   help="repetitions of every (emulator, files, mode, concurrency); the order "
                        "of the modes alternates between repetitions")
    p.add_argument("--sequential-repeats", type=_positive, default=1,
                   help="repetitions of the slow naive and v1 modes (at most --repeats)")
    p.add_argument("--quick", action="store_true",
                   help="500 files, concurrency 16 and 64, one repetition")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT / "emulators")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--render", type=Path, metavar="RESULTS.json",
                   help="run nothing: write the report and plots of a results JSON to --out")
    p.add_argument("--include", action="append", type=Path, default=[],
                   help="results JSON of an earlier (e.g. interrupted) run whose runs to add "
                        "to this report (repeatable); ratios still pair runs of equal size")
    args = p.parse_args(argv)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.render is not None:
        doc = json.loads(args.render.read_text())
        doc["summary"] = summary(doc["runs"])
        plots = plot(doc, out)
        (out / "report.md").write_text(render_markdown(doc, plots))
        print(f"report: {out / 'report.md'}")
        return 0
    if args.quick:
        args.files, args.concurrency, args.repeats = [500], [16, 64], 1
    args.sequential_repeats = min(args.sequential_repeats, args.repeats)
    scenarios = ([Scenario.parse(s) for s in args.scenario] if args.scenario else
                 [Scenario.for_files(n, args.partitions, args.size) for n in args.files])
    runs = plan(args.emulators, scenarios, args.modes, args.concurrency, args.sequential_max,
                args.repeats, args.sequential_repeats, dict(args.concurrency_at))
    command = "python -m benchmarks.emulators " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    settings = {"command": command.strip(), "scenarios": [s.label for s in scenarios],
                "modes": args.modes, "concurrency": args.concurrency,
                "concurrency_at": {str(f): c for f, c in args.concurrency_at},
                "sequential_max": args.sequential_max, "repeats": args.repeats,
                "sequential_repeats": args.sequential_repeats, "committer_tree": committer_tree()}
    results: list[RunResult] = []
    for earlier in args.include:
        results.extend(RunResult(**r) for r in json.loads(earlier.read_text())["runs"])
    started = time.monotonic()
    try:
        with _interruptible(), code_snapshot() as code:
            settings["code_sha256"] = code_digest(code)
            for result in run_all(runs, progress=not args.no_progress, code=code):
                results.append(result)
                # after every run, so an interrupted matrix still leaves its measurements
                partial = results_document(results, {**settings, "partial": True})
                (out / "emulators-partial.json").write_text(json.dumps(partial, indent=2))
    except KeyboardInterrupt as e:
        print(f"interrupted ({str(e) or 'Ctrl-C'}); every emulator started was stopped; "
              f"{len(results)} runs in {out / 'emulators-partial.json'}", file=sys.stderr)
        return 130
    settings["wall_s"] = round(time.monotonic() - started, 1)
    doc = results_document(results, settings)
    doc["summary"] = summary(doc["runs"])
    json_path = save_results(out, "emulators", doc)
    plots = plot(doc, out)
    report = out / "report.md"
    report.write_text(render_markdown(doc, plots))
    print(f"results: {json_path}\nreport:  {report}\nplots:   {', '.join(str(x) for x in plots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
