"""``commit-job`` shows what the static rate cap and throttling cost the commit."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import run
from tests.cli.jobs import write_job


def test_commit_job_shows_the_waits_on_the_rate_cap(tmp_path: Path) -> None:
    tasks = [{f"p=0/t{t}-{i}.csv": b"x" for i in range(30)} for t in range(3)]
    layout = write_job(tmp_path / "dest", "job1", tasks)
    r = run("commit-job", layout.dest, "--job-id", "job1",
            "--conf", "mapreduce.manifest.committer.io.rate.limit=40")
    assert r.code == 0, r.err
    assert "Waits" in r.out and "renames waiting on the static rate cap" in r.out
    assert "op_rename_rate_limited" in r.out
    # the cap held the renames back for most of their stage: the last log line says so
    assert "held the rename stage back" in r.err
    assert "mapreduce.manifest.committer.io.rate.limit" in r.err.splitlines()[-1]


def test_commit_job_json_reports_waits_by_statistic(tmp_path: Path) -> None:
    tasks = [{f"p=0/t{t}-{i}.csv": b"x" for i in range(30)} for t in range(3)]
    layout = write_job(tmp_path / "dest", "job1", tasks)
    r = run("commit-job", layout.dest, "--job-id", "job1", "--json",
            "--conf", "mapreduce.manifest.committer.io.rate.limit=40")
    assert r.code == 0, r.err
    waits = r.json()["waits_ms"]
    assert waits["op_rename_rate_limited"] > 0
    assert waits["job_stage_rename_files_rate_limited"] > 0
