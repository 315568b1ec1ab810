"""Spark Connect: a server started with the committer's ``--conf`` lines commits a remote
client's partitioned writes (create, append, static and dynamic overwrite) itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.connect_server import (
    ConnectServer,
    connect_server_available,
    start_connect_server,
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        not connect_server_available(),
        reason="this pyspark ships no Spark Connect server (Spark 3.5's is a separate artifact)",
    ),
]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = start_connect_server(tmp_path_factory.mktemp("connect"))
    try:
        yield server
    finally:
        server.stop()


def _steps(server: ConnectServer, dest: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.connect_client", server.url, str(dest)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr[-4000:], server.log_tail())
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {s["step"]: s for s in steps}


def test_connect_client_writes_are_committed_by_this_committer(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    dest = tmp_path / "connect table ü"
    steps = _steps(connect_server, dest)
    assert list(steps) == ["create", "append", "overwrite", "dynamic overwrite"]

    def ids(step: str) -> list[int]:
        return [r[0] for r in steps[step]["rows"]]

    assert ids("create") == list(range(30))
    assert ids("append") == list(range(36))
    assert ids("overwrite") == list(range(100, 109))
    assert steps["dynamic overwrite"]["rows"] == sorted(
        [[i, i % 3] for i in range(100, 109) if i % 3 != 1] + [[200, 1], [201, 1]]
    )
    job_ids = set()
    for step in steps.values():
        doc = step["success"]
        assert doc["name"] == "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
        assert doc["success"] is True
        assert "manifest" in str(doc["committer"]).lower(), doc["committer"]
        job_ids.add(doc["jobId"])
    assert len(job_ids) == 4, "each write's own job wrote _SUCCESS"
    assert not (dest / "_temporary").exists() or not list((dest / "_temporary").iterdir())
    # The server had no Python driver: each job's commit ran the engine as a subprocess.
    log = connect_server.log_tail(10_000_000).splitlines()
    for job_id in job_ids:
        [line] = [x for x in log if f"Manifest committer job {job_id} committed" in x]
        assert "via subprocess" in line, line
