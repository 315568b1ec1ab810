"""A commit held back by the static rate cap says so: the statistics of ``_SUCCESS`` and the
commit's last log line, which names the key to raise."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from manifest_schema import SuccessData
from tests.committer.helpers import LOCAL, fast_config


def _commit(dest: Path, files: int, rate: int) -> SuccessData:
    config = fast_config(io_rate_limit=rate)
    job = LOCAL.new_job(str(dest), config=config)
    committed = {}
    for t in range(3):
        ta = LOCAL.task_attempt(str(dest), t, 0,
                                {f"p=0/t{t}-{i}.csv": b"x" for i in range(files // 3)})
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    return job.commit(committed)


def test_a_commit_the_cap_held_back_records_it_and_its_last_log_line_names_the_key(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="committer")
    # 30 renames and the commit's other calls at 10/s, after a burst of 10: about 4 s held,
    # and so much more than the rest of the stage that no machine's load turns it into less
    # than the share the notice needs (a tenth)
    summary = _commit(tmp_path / "dest", 30, rate=10)
    on_disk = SuccessData.loads((tmp_path / "dest" / "_SUCCESS").read_bytes())
    means = on_disk.iostatistics.meanstatistics
    held = means["job_stage_rename_files_rate_limited.mean"]
    stage = means["job_stage_rename_files.mean"]
    assert held.samples == 1 and 0.1 * stage.sum < held.sum <= stage.sum + 1
    assert means["op_rename_rate_limited.mean"].sum > 0  # each rename's own wait, added up
    assert summary.iostatistics.meanstatistics.keys() == means.keys()
    last = [r for r in caplog.records if r.name.startswith("committer")][-1]
    assert last.levelno == logging.WARNING
    message = last.getMessage()
    assert "static rate cap of 10 operations/s held the rename stage back" in message
    assert "mapreduce.manifest.committer.io.rate.limit" in message


def test_without_a_cap_nothing_is_recorded_or_said(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="committer")
    summary = _commit(tmp_path / "dest", 30, rate=0)
    assert "job_stage_rename_files_rate_limited.mean" not in (
        summary.iostatistics.meanstatistics)
    assert not any("rate cap" in r.getMessage() for r in caplog.records)
