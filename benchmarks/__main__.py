"""``python -m benchmarks [SUITE ...] [options]``: run benchmark suites, save results and report.

Each suite is a module with ``NAME``, ``TITLE``, ``add_arguments(parser)``, ``run(args) -> dict``
and ``report(result) -> str`` (Markdown). Register a new suite (emulators, spark, ...) by adding
its module to ``SUITES``; ``DEFAULT`` is what ``python -m benchmarks`` (``make bench``) runs,
and ``all`` runs every registered suite, each parsing the options it takes. Results:
``<out>/<suite>-<time>.json`` (and ``-latest.json``) plus ``<out>/report.md``.
"""

from __future__ import annotations

import argparse
import importlib
import re
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
    "request-pace": "benchmarks.request_pace",
    "cloud-scale": "benchmarks.cloud_scale",
    "cloud-peers": "benchmarks.cloud_peers",
    "cloud-writes": "benchmarks.cloud_peers.whole_write",
    "c-paths": "benchmarks.c_paths",
}
DEFAULT = ("local-commit", "memory")
#: an option's name on the command line (not a negative number given as a value)
_OPTION = re.compile(r"--?[A-Za-z]")


def _module(name: str) -> ModuleType:
    return importlib.import_module(SUITES[name])


def _parser(modules: list[ModuleType], conflict_handler: str = "error"
            ) -> argparse.ArgumentParser:
    # no abbreviations: an option is checked against every chosen suite's by its full name
    parser = argparse.ArgumentParser(prog="python -m benchmarks", allow_abbrev=False,
                                     conflict_handler=conflict_handler,
                                     description="Benchmark suites: " + ", ".join(SUITES))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quiet", action="store_true")
    for mod in modules:
        mod.add_arguments(parser.add_argument_group(mod.NAME))
    return parser


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


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

    modules = [_module(n) for n in names]
    if {"-h", "--help"} & set(argv):
        # one help for the chosen suites; where two name the same option, the last one's text
        _parser(modules, conflict_handler="resolve").print_help()
        return 0
    # Each suite parses the command line alone: several suites may name the same option
    # (cloud-peers and cloud-scale both take --files) and each gets it with its own meaning.
    parsed = [_parser([mod]).parse_known_args(argv)[0] for mod in modules]
    known = {opt for mod in modules for opt in _option_strings(_parser([mod]))}
    strays = [a.split("=", 1)[0] for a in argv
              if _OPTION.match(a) and a.split("=", 1)[0] not in known]
    if strays:
        print(f"no chosen suite takes {', '.join(strays)}", file=sys.stderr)
        return 2

    sections: list[tuple[str, str]] = []
    for mod, args in zip(modules, parsed, strict=True):
        print(f"== {mod.NAME}: {mod.TITLE}", flush=True)
        result = mod.run(args)
        result["machine"] = machine()
        path = save_results(args.out, mod.NAME, result)
        text = mod.report(result)
        sections.append((mod.TITLE, text))
        print(text, flush=True)
        print(f"(results: {path})", flush=True)
    report = write_report(parsed[0].out, sections)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
