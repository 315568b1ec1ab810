"""What an intercepted engine (:mod:`tests.spark.intercepting_engine`) may do at job commit,
named by the tests: each takes the commit request and the interception directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from committer.spark.engine import handle
from manifest_schema.uris import uri_to_location


def _local(uri: str) -> Path:
    return Path(uri_to_location(uri).removeprefix("file:"))


def lose_a_manifest(request: dict[str, Any], directory: Path) -> None:
    """The first committed task's manifest disappears before job commit reads it."""
    job_dir = _local(request["destinationUri"]) / "_temporary" / f"manifest_{request['jobId']}"
    task = request["committedTasks"][0]["taskId"]
    (job_dir / "00" / "manifests" / f"{task}-manifest.json").unlink()


def keep_manifests(request: dict[str, Any], directory: Path) -> None:
    """Copies the committed manifests to ``directory/manifests`` for the test to read."""
    job_dir = _local(request["destinationUri"]) / "_temporary" / f"manifest_{request['jobId']}"
    kept = directory / "manifests"
    kept.mkdir(exist_ok=True)
    for task in request["committedTasks"]:
        name = f"{task['taskId']}-manifest.json"
        shutil.copyfile(job_dir / "00" / "manifests" / name, kept / name)


def claim_other_attempt(request: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Commits as if the first task's committed attempt were attempt 99."""
    forged = json.loads(json.dumps(request))
    task = forged["committedTasks"][0]
    task["taskAttemptId"] = task["taskAttemptId"].rsplit("_", 1)[0] + "_99"
    return handle(forged)


def leave_uncommitted(request: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Answers success without committing: the manifests stay for another committer."""
    return {"ok": True, "result": {}}
