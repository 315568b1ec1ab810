"""The C modules' calls, two builds side by side in one process: is the shipped build slower?

Both C modules (``committer/store/local/_native.c``, ``committer/job/stages/_checks.c``) are
compiled twice into a temporary directory, with the same compiler and flags:

- *shipped*: the working tree's sources as ``setup.py`` builds them (Python 3.10's limited API,
  ``*.abi3.so``);
- *baseline*: ``--c-baseline REV``'s sources (``git show``), built against this Python's full
  API as they were; without it, the working tree's own sources against the full API (what the
  limited API alone costs).

Both builds are loaded into this process under their own names. Each workload calls one
function of each build in turn on the same inputs, ``--c-repeats`` times, the first build
alternating; a call is timed by this thread's CPU clock (the calls run on the calling thread, so
time another process held the CPU is not charged to them), and the two builds' answers must be
equal. Reported: the median of each build's calls per entry, and shipped / baseline of the
medians and of the fastest calls.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import io
import itertools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from benchmarks.common import ROOT, markdown_table

NAME = "c-paths"
TITLE = "The C modules' calls: the shipped (abi3) build beside a baseline build"

SOURCES = {"_native": "committer/store/local/_native.c",
           "_checks": "committer/job/stages/_checks.c"}
LIMITED_API = [("Py_LIMITED_API", "0x030A0000")]  # as setup.py
RENAME_NOREPLACE = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--c-baseline", metavar="REV", default=None,
                   help="git revision whose C sources are the baseline (default: the working "
                        "tree's, built against the full API)")
    p.add_argument("--c-entries", type=int, default=100_000,
                   help="entries per call of the in-memory checks (_checks)")
    p.add_argument("--c-fs-entries", type=int, default=20_000,
                   help="files per call of the local-disk loops (_native)")
    p.add_argument("--c-repeats", type=int, default=15)


def _build(sources: dict[str, Path], out: Path, limited: bool) -> dict[str, Path]:
    """The modules compiled by setuptools' build_ext (setup.py's flags), their file by name."""
    from setuptools import Distribution, Extension

    extensions = [Extension(name, [str(src)], define_macros=LIMITED_API if limited else [],
                            py_limited_api=limited, extra_compile_args=["-O2"])
                  for name, src in sources.items()]
    dist = Distribution({"name": "c-paths-benchmark", "ext_modules": extensions})
    command: Any = dist.get_command_obj("build_ext")
    command.build_lib = str(out)
    command.build_temp = str(out / "objects")
    command.ensure_finalized()
    with contextlib.redirect_stdout(io.StringIO()):
        command.run()
    return {name: out / command.get_ext_filename(name) for name in sources}


def _load(package: str, name: str, path: Path) -> ModuleType:
    """The extension at ``path`` as ``package.name`` (its init function is ``PyInit_<name>``)."""
    full = f"{package}.{name}"
    loader = importlib.machinery.ExtensionFileLoader(full, str(path))
    spec = importlib.util.spec_from_file_location(full, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def builds(baseline_rev: str | None, work: Path) -> dict[str, dict[str, ModuleType]]:
    """{"baseline": {...}, "shipped": {...}}: each build's two modules, loaded."""
    here = {name: ROOT / rel for name, rel in SOURCES.items()}
    if baseline_rev is None:
        old = here
    else:
        (work / "baseline-src").mkdir()
        old = {}
        for name, rel in SOURCES.items():
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{baseline_rev}:{rel}"],
                                  capture_output=True, check=True).stdout
            old[name] = work / "baseline-src" / f"{name}.c"
            old[name].write_bytes(text)
    made = {"baseline": _build(old, work / "baseline", limited=False),
            "shipped": _build(here, work / "shipped", limited=True)}
    return {build: {name: _load(f"c_paths_{build}", name, path) for name, path in files.items()}
            for build, files in made.items()}


# -- workloads: each makes its inputs and returns (entries, a call of one build's modules) ----

Call = Callable[[dict[str, ModuleType]], Any]


def _manifest_files(n: int) -> tuple[list[Any], tuple[Any, ...]]:
    from committer.job.stages.entry_checks import _RESERVED, _uri_prefix

    dest = "/data/out/"
    own = "/data/out/_temporary/manifest_j/00/tasks/attempt_j_m_000001_0/"
    own_uri, dest_uri = _uri_prefix(own), _uri_prefix(dest)
    assert own_uri is not None and dest_uri is not None
    rels = [f"year=2024/p={i % 100}/part-{i:06d}-0b6d1f3a-c000.snappy.parquet" for i in range(n)]
    document = orjson.dumps([{"s": own_uri + r, "d": dest_uri + r, "z": 1024 + i, "e": None}
                             for i, r in enumerate(rels)])
    return orjson.loads(document), (own_uri, dest_uri, own, dest, _RESERVED)


def _check_workloads(n: int) -> Iterator[tuple[str, int, Call]]:
    from committer.job.stages.entry_checks import _DIR_STATUSES, _RESERVED, _uri_prefix

    files, args = _manifest_files(n)
    yield "_checks.files", n, lambda m: m["_checks"].files(files, *args)

    dest_uri, root_uri = _uri_prefix("/data/out/"), _uri_prefix("/data/out")
    dirs = orjson.loads(orjson.dumps([{"d": f"{dest_uri}year=2024/p={i}", "t": 1, "l": 2}
                                      for i in range(n)]))
    yield ("_checks.directories", n, lambda m: m["_checks"].directories(
        dirs, dest_uri, root_uri, "/data/out/", _DIR_STATUSES, _RESERVED))

    entries = [(f"/data/out/_temporary/a/p={i % 100}/f{i}", f"/data/out/p={i % 100}/f{i}", 0,
                None) for i in range(n)]

    def note(m: dict[str, ModuleType]) -> Any:
        seen: set[int] = set()
        suspects: set[int] = set()
        parents: set[str] = set()
        m["_checks"].note_destinations(entries, seen, suspects, parents)
        return len(seen), len(suspects), sorted(parents)

    yield "_checks.note_destinations", n, note

    paths = [f"/data/out/p=1/part-{i:06d}.parquet" for i in range(n)]
    yield "_checks.names_in", n, lambda m: m["_checks"].names_in(paths, "/data/out/p=1")


@contextlib.contextmanager
def _open_dir(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def _disk_workloads(n: int, root: Path) -> Iterator[tuple[str, int, Call]]:
    """The local-disk loops on ``n`` empty files (in ``root``), each call leaving the tree as
    it found it."""
    a, b, p = root / "a", root / "b", root / "a" / "p"
    for d in (a, b, p):
        d.mkdir()
    names = [f"part-{i:06d}-0b6d1f3a.parquet" for i in range(n)]
    for name in names:
        (p / name).touch()
    with _open_dir(p) as pfd, _open_dir(b) as bfd, _open_dir(a) as afd:
        pre = f"{p}/"
        there = [(f"{pre}{x}", f"{b}/{x}", 0, None) for x in names]
        back = [(f"{b}/{x}", f"{pre}{x}", 0, None) for x in names]

        def rename_both_ways(m: dict[str, ModuleType]) -> Any:
            native = m["_native"]
            went = native.rename_into(there, 0, n, pfd, len(pre), [bfd] * n, RENAME_NOREPLACE)
            came = native.rename_into(back, 0, n, bfd, len(f"{b}/"), [pfd] * n,
                                      RENAME_NOREPLACE)
            return went, came

        yield "_native.rename_into (there and back)", 2 * n, rename_both_ways
        # every path read, none renamed: a negative directory fd stops at the first entry
        yield ("_native.rename_into (paths only)", n,
               lambda m: m["_native"].rename_into(there, 0, n, pfd, len(pre), [-1] * n, 1))
        accented = [(f"{pre}é{x}", f"{b}/é{x}", 0, None) for x in names]
        yield ("_native.rename_into (paths only, not ASCII)", n,
               lambda m: m["_native"].rename_into(accented, 0, n, pfd, len(pre), [-1] * n, 1))
        yield ("_native.regular_files", n,
               lambda m: m["_native"].regular_files(pfd, names, [0] * n))
        yield "_native.identify", n, lambda m: m["_native"].identify(afd, there, f"{a}/")
        yield ("_native.holds_names", n,
               lambda m: m["_native"].holds_names(pfd, names, None, None))
        missing = [f"{pre}missing-{i}" for i in range(n)]
        yield ("_native.rmdir_paths (none there)", n,
               lambda m: m["_native"].rmdir_paths(pfd, missing, len(pre)))


def _measure(name: str, entries: int, call: Call, loaded: dict[str, dict[str, ModuleType]],
             repeats: int) -> dict[str, Any]:
    order = list(loaded)
    answers = {build: call(loaded[build]) for build in order}  # warm, and compared
    if answers["baseline"] != answers["shipped"]:
        raise SystemExit(f"{name}: the two builds answer differently")
    if answers["shipped"] is None and not name.startswith("_native"):
        raise SystemExit(f"{name}: the checks declined the workload")
    times: dict[str, list[float]] = {build: [] for build in order}
    for r in range(repeats):
        for build in order if r % 2 == 0 else order[::-1]:
            t0 = time.thread_time_ns()
            call(loaded[build])
            times[build].append((time.thread_time_ns() - t0) / entries)
    row: dict[str, Any] = {"name": name, "entries": entries}
    for build in order:
        row[build] = {"median_ns": statistics.median(times[build]),
                      "min_ns": min(times[build]), "all_ns": times[build]}
    row["ratio_median"] = row["shipped"]["median_ns"] / row["baseline"]["median_ns"]
    row["ratio_min"] = row["shipped"]["min_ns"] / row["baseline"]["min_ns"]
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="c-paths-"))
    try:
        loaded = builds(args.c_baseline, work)
        (work / "disk").mkdir()
        # measured as they come: the disk workloads' directories are open until their last
        rows = [_measure(name, entries, call, loaded, args.c_repeats)
                for name, entries, call in itertools.chain(
                    _check_workloads(args.c_entries),
                    _disk_workloads(args.c_fs_entries, work / "disk"))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"baseline": args.c_baseline or "working tree, full API", "shipped": "working tree, "
            "limited API 3.10 (abi3)", "repeats": args.c_repeats, "rows": rows}


def report(result: dict[str, Any]) -> str:
    table = markdown_table(
        ["call", "entries", "baseline ns/entry (median)", "shipped ns/entry (median)",
         "shipped / baseline (median)", "(fastest)"],
        [[r["name"], r["entries"], f"{r['baseline']['median_ns']:.1f}",
          f"{r['shipped']['median_ns']:.1f}", f"{r['ratio_median']:.3f}",
          f"{r['ratio_min']:.3f}"] for r in result["rows"]])
    return (f"Baseline: {result['baseline']}; shipped: {result['shipped']}; "
            f"{result['repeats']} calls of each, alternating, thread CPU time.\n\n{table}\n")
