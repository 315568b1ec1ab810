"""The demo's summary shows the waits on the rate cap and throttling when there were some."""

from __future__ import annotations

from typing import Any

from committer.spark.demo import summary_tables


def _summary(means: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {"committer": "spark-manifest-committer", "jobId": "j", "success": True,
            "metrics": {}, "diagnostics": {},
            "iostatistics": {"meanstatistics": means, "maximums": {}}}


def test_waits_get_a_table_of_their_own() -> None:
    tables = summary_tables(_summary({
        "job_stage_rename_files.mean": {"samples": 1, "sum": 9000},
        "job_stage_rename_files_rate_limited.mean": {"samples": 1, "sum": 5700},
        "op_rename_throttle_backoff.mean": {"samples": 3, "sum": 3000},
    }))
    assert len(tables) == 4
    waits = tables[3]
    assert "rate cap" in str(waits.title)
    names = list(waits.columns[0].cells)
    assert names == ["job_stage_rename_files_rate_limited", "op_rename_throttle_backoff"]
    assert list(waits.columns[3].cells) == ["5700", "3000"]


def test_no_waits_no_table() -> None:
    tables = summary_tables(_summary({"job_stage_rename_files.mean": {"samples": 1, "sum": 9}}))
    assert len(tables) == 3
