"""The subprocess entry point, driven as the JVM drives it: JSON on stdin, JSON on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(stdin: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "committer.spark.driver"],
        input=stdin.encode("utf-8"), capture_output=True, cwd=ROOT, timeout=120, check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def _request(operation: str, dest: Path, **extra: object) -> str:
    doc = {
        "operation": operation, "jobId": "job-1", "jobAttempt": 0,
        "destination": str(dest), "destinationUri": dest.as_uri().replace("file:///", "file:/"),
        "dynamicPartitionOverwrite": False, "conf": {}, **extra,
    }
    return json.dumps(doc)


def test_unreadable_request_exits_non_zero_with_message() -> None:
    code, response = _run("not json")
    assert code == 1
    assert response["ok"] is False
    assert "unreadable request" in str(response["error"])


def test_setup_commit_of_an_empty_job(tmp_path: Path) -> None:
    dest = tmp_path / "out ü"
    code, response = _run(_request("setupJob", dest))
    assert (code, response) == (0, {"ok": True, "result": {}})
    assert (dest / "_temporary" / "manifest_job-1" / "00" / "manifests").is_dir()
    code, response = _run(_request("commitJob", dest, committedTasks=[]))
    assert code == 0, response
    assert json.loads((dest / "_SUCCESS").read_text(encoding="utf-8"))["jobId"] == "job-1"


def test_commit_of_a_task_without_manifest_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    assert _run(_request("setupJob", dest))[0] == 0
    tasks = [{"taskId": "task_1_0001_m_000000", "taskAttemptId": "attempt_1_0001_m_000000_0"}]
    code, response = _run(_request("commitJob", dest, committedTasks=tasks))
    assert code == 1
    assert response["errorType"] == "UntrustedManifestError"
    assert "task_1_0001_m_000000" in str(response["error"])
    assert not (dest / "_SUCCESS").exists()
    code, response = _run(_request("abortJob", dest))
    assert code == 0
    assert not (dest / "_temporary" / "manifest_job-1").exists()


@pytest.mark.parametrize("operation", ["renameJob", ""])
def test_unknown_operation(tmp_path: Path, operation: str) -> None:
    code, response = _run(_request(operation, tmp_path / "x"))
    assert code == 1
    assert "unknown operation" in str(response["error"])
