"""``python -m benchmarks [SUITE ...] [options]``: run benchmark suites, save results and report.

Each suite is a module with ``NAME``, ``TITLE``, ``add_arguments(parser)``, ``run(args) -> dict``
and ``report(result) -> str`` (Markdown). Register a new suite (emulators, spark, ...) by adding
its module to ``SUITES``; ``DEFAULT`` is what ``python -m benchmarks`` (``make bench``) runs,
and ``all`` runs every registered suite. Results: ``<out>/<suite>-<time>.json`` (and
``-latest.json``) plus ``<out>/report.md``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from benchmarks.common import DEFAULT_OUT, machine, save_results, write_report

SUITES: dict[str, str] = {
    "local-commit": "benchmarks.local_commit",
    "hadoop-local": "benchmarks.hadoop_local",
    "memory": "benchmarks.memory",
    "dir-commit": "benchmarks.dir_commit",
    "dir-stores": "benchmarks.dir_stores",
    "small-writes": "benchmarks.small_writes",
    "cloud-cpu": "benchmarks.cloud_cpu",
    "cloud-races": "benchmarks.cloud_races",
    "cloud-scale": "benchmarks.cloud_scale",
    "cloud-peers": "benchmarks.cloud_peers",
    "cloud-writes": "benchmarks.cloud_peers.whole_write",
    "c-paths": "benchmarks.c_paths",
}
DEFAULT = ("local-commit", "memory")


def _module(name: str) -> ModuleType:
    return importlib.import_module(SUITES[name])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names: list[str] = []
    while argv and not argv[0].startswith("-"):
        names.append(argv.pop(0))
    if not names:
        names = list(DEFAULT)
    if "all" in names:
        names = list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        print(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}, all",
              file=sys.stderr)
        return 2

    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description="Benchmark suites: " + ", ".join(SUITES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quiet", action="store_true")
    modules = [_module(n) for n in names]
    # Options of the chosen suites; a suite's --files etc. apply to that suite.
    for mod in modules:
        group = parser.add_argument_group(mod.NAME)
        mod.add_arguments(group)
    args = parser.parse_args(argv)

    sections: list[tuple[str, str]] = []
    for mod in modules:
        print(f"== {mod.NAME}: {mod.TITLE}", flush=True)
        result = mod.run(args)
        result["machine"] = machine()
        path = save_results(args.out, mod.NAME, result)
        text = mod.report(result)
        sections.append((mod.TITLE, text))
        print(text, flush=True)
        print(f"(results: {path})", flush=True)
    report = write_report(args.out, sections)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
