"""The request-pace suite on a tiny run: the engine's own store sends its requests to the
simulated account answering at once and one at a time, in fresh interpreters, alternated, and
the CPU a request of each is reported."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import request_pace


def _args(**changes: object) -> argparse.Namespace:
    values: dict[str, object] = {"requests": 40, "warmup": 5, "pace": 400.0,
                                 "latency_ms": 1.0, "repeats": 2}
    values.update(changes)
    return argparse.Namespace(**values)


def test_a_tiny_run_measures_both_paces_alternated() -> None:
    result = request_pace.run(_args())
    modes = [(r["repeat"], r["mode"]) for r in result["runs"]]
    assert modes == [(0, "at-once"), (0, "paced"), (1, "paced"), (1, "at-once")]
    for run in result["runs"]:
        assert run["cpu_us"] > 0 and run["loop_cpu_us"] > 0
        if run["mode"] == "paced":
            # one at a time: the last answer came no sooner than the account's pace allows
            assert run["wall_s"] >= 0.9 * 40 / 400
    assert result["paced_over_at_once"] > 0
    text = request_pace.report(result)
    assert "at-once" in text and "paced" in text and "times the CPU a request" in text


def test_a_pace_of_nothing_is_refused() -> None:
    with pytest.raises(SystemExit, match="pace"):
        request_pace.run(_args(pace=0.0))
