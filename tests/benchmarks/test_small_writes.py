"""The small-writes benchmark's parsing of Spark's metrics and its summary (no Spark here)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.small_writes import _metric_seconds, _rotated, summarize


@pytest.mark.parametrize(("text", "seconds"), [
    ("12 ms", 0.012),
    ("1.5 s", 1.5),
    ("total (min, med, max (stageId: taskId))\n5 ms (2 ms, 3 ms, 3 ms (stage 20.0: task 41))",
     0.005),
    ("total (min, med, max (stageId: taskId))\n1,250 ms (600 ms, 650 ms, 650 ms (stage 1.0: "
     "task 2))", 1.25),
])
def test_metric_seconds(text: str, seconds: float) -> None:
    assert _metric_seconds(text) == pytest.approx(seconds)


def test_rotation_puts_every_mode_first_once() -> None:
    modes = ("a", "b", "c")
    assert [_rotated(modes, k)[0] for k in range(3)] == ["a", "b", "c"]
    assert sorted(_rotated(modes, 2)) == sorted(modes)


def _driver(mode: str, times: list[float]) -> dict[str, Any]:
    return {"mode": mode, "times": times, "load_average": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],
            "metrics": [{"job_commit_time": t / 10, "task_commit_time": t / 20} for t in times],
            "rows_read": [100]}


def test_summary_ratios_are_against_the_default_committer() -> None:
    result: dict[str, Any] = {
        "sequential": {"default": [_driver("default", [1.0, 1.0, 3.0])],
                       "configure": [_driver("configure", [1.5, 1.5, 1.5])],
                       "conf": [_driver("conf", [2.0, 2.0, 0.5])]},
        "threads": {"default": [], "configure": []},
        "connect": {"default": [], "ours": []},
        "engine_parts": {"jobs": [{"setupJob": 0.001, "commitJob": 0.01,
                                   "setup_parts": {"setup": 0.001},
                                   "parts": {"journal saves": 0.004},
                                   "calls": {"journal saves": 6}}]},
    }
    s = summarize(result)
    assert s["sequential"]["default"]["all"]["median"] == 1.0
    assert s["sequential"]["configure"]["ratio"] == 1.5
    assert s["sequential"]["conf"]["ratio"] == 2.0
    assert s["threads"] == {} and s["connect"] == {}
    assert s["breakdown"]["configure"]["job_commit_time"]["median"] == 0.15
    assert s["engine_parts"]["calls"]["journal saves"] == 6
