"""The dir-commit suite end to end on a tiny own-partition job: every trial runs in its own
interpreter, commits (or, for the floor, proves) every file, and the report gives each."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import dir_commit


def test_a_tiny_own_partition_layout_runs_every_trial(tmp_path: Path) -> None:
    args = argparse.Namespace(layouts="3x4own", no_hadoop=True, dir_repeats=1,
                              ceiling_threads="0", workdir=str(tmp_path), quiet=True)
    result = dir_commit.run(args)
    (lay,) = result["layouts"]
    assert set(lay["elapsed"]) == {"ours", "ours-per-file", "ceiling-0", "dir-ceiling-0",
                                   "dir-ceiling-2", "floor"}
    (rep,) = lay["repetitions"]
    # every file moved with its partition; the one file rename is _SUCCESS put in place
    assert rep["ours"]["directories_moved"] == 3 and rep["ours"]["file_renames"] == 1
    assert rep["ours-per-file"]["directories_moved"] == 0
    assert rep["ours-per-file"]["file_renames"] == 12 + 1
    floor = rep["floor"]
    assert floor["parse_seconds"] > 0 and floor["proof_seconds"] > 0
    assert abs(floor["elapsed"] - floor["parse_seconds"] - floor["proof_seconds"]) < 1e-6
    text = dir_commit.report(result)
    assert "floor s (parse + proof)" in text and "3x4own" in text
