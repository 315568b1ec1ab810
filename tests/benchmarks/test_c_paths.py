"""The c-paths benchmark on small inputs: both builds of both C modules compile, load side by
side, and give the same answers on every workload (the limited-API build beside the full-API
build of the same sources)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import c_paths

# compiles both C modules twice, from the checkout's sources (not in the wheel)
pytestmark = pytest.mark.slow


def test_both_builds_answer_alike_on_every_call() -> None:
    args = argparse.Namespace(c_baseline=None, c_entries=300, c_fs_entries=50, c_repeats=2)
    result = c_paths.run(args)
    names = [row["name"] for row in result["rows"]]
    assert {n.split(" ")[0] for n in names} == {
        "_checks.files", "_checks.directories", "_checks.note_destinations", "_checks.names_in",
        "_native.rename_into", "_native.regular_files", "_native.identify",
        "_native.holds_names", "_native.rmdir_paths"}
    for row in result["rows"]:
        assert len(row["shipped"]["all_ns"]) == len(row["baseline"]["all_ns"]) == 2
        assert row["ratio_median"] > 0
    assert "| _checks.files | 300 |" in c_paths.report(result)
