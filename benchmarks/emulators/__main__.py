"""``python -m benchmarks.emulators [--emulators azurite,gcs] [--files 1000,2000,5000] ...``

Examples:
    python -m benchmarks.emulators                          # the full default matrix
    python -m benchmarks.emulators --quick                  # 500 files, a few minutes
    python -m benchmarks.emulators --scenario 10x100x4x1024 --modes committer,raw
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from benchmarks.common import DEFAULT_OUT, save_results
from benchmarks.emulators.modes import MODES
from benchmarks.emulators.report import plot, render_markdown
from benchmarks.emulators.runner import (
    EMULATORS,
    RunResult,
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
    p.add_argument("--concurrency", default="16,64,256", type=_ints,
                   help="requests in flight, swept for this committer and the raw ceiling")
    p.add_argument("--sequential-max", type=int, default=5000,
                   help="skip the naive and v1 modes above this many files (they are slow)")
    p.add_argument("--quick", action="store_true", help="500 files, concurrency 16 and 64")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT / "emulators")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--include", action="append", type=Path, default=[],
                   help="results JSON of an earlier (e.g. interrupted) run whose runs to add "
                        "to this report (repeatable); ratios still pair runs of equal size")
    args = p.parse_args(argv)

    if args.quick:
        args.files, args.concurrency = [500], [16, 64]
    scenarios = ([Scenario.parse(s) for s in args.scenario] if args.scenario else
                 [Scenario.for_files(n, args.partitions, args.size) for n in args.files])
    runs = plan(args.emulators, scenarios, args.modes, args.concurrency, args.sequential_max)
    command = "python -m benchmarks.emulators " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    settings = {"command": command.strip(), "scenarios": [s.label for s in scenarios],
                "modes": args.modes, "concurrency": args.concurrency,
                "sequential_max": args.sequential_max}
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    for earlier in args.include:
        results.extend(RunResult(**r) for r in json.loads(earlier.read_text())["runs"])
    for result in run_all(runs, progress=not args.no_progress):
        results.append(result)
        # after every run, so an interrupted matrix still leaves its measurements
        partial = results_document(results, {**settings, "partial": True})
        (out / "emulators-partial.json").write_text(json.dumps(partial, indent=2))
    doc = results_document(results, settings)
    json_path = save_results(out, "emulators", doc)
    plots = plot(doc, out)
    report = out / "report.md"
    report.write_text(render_markdown(doc, plots))
    print(f"results: {json_path}\nreport:  {report}\nplots:   {', '.join(str(x) for x in plots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
