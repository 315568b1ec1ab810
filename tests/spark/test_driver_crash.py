"""The driver is killed (SIGKILL) in the middle of job commit; ``manifest-committer resume``
finishes the commit, and the output then reads back complete: with the shim's manifests, and
with the same manifests stripped of file identities (as Hadoop's task committer writes them),
which job commit then records itself before anything moves."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from committer.job.durability.interrupted import interrupted_commits
from committer.store import open_store
from manifest_schema.journal import State
from tests.spark.crash_driver import READY
from tests.spark.helpers import WAIT_S, assert_ours, data_files, success

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ROWS = 20_000
PARTITIONS = 20  # two tasks each write every partition: 40 files
FILES = 2 * PARTITIONS
KILL_AFTER = 15


def _run_crashing_driver(dest: Path, etags: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    # Its own session (process group): the kill switch takes down the driver and its JVM.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.crash_driver", str(dest), str(ROWS), str(PARTITIONS),
         str(KILL_AFTER), *([] if etags else ["no-etags"])],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=WAIT_S)  # a session of its own: generous
    finally:
        # Whatever is left of that group (nothing, normally).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("etags", [True, False], ids=["etags", "no-etags"])
def test_driver_killed_during_job_commit_then_resume(spark: Any, spark_work_dir: Path,
                                                     etags: bool) -> None:
    dest = spark_work_dir / f"driver killed {'etags' if etags else 'no etags'}"
    done = _run_crashing_driver(dest, etags)
    assert READY in done.stdout, done.stderr[-3000:]
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout,
                                                done.stderr[-3000:])

    # Killed mid-rename: part of the output is in place, no _SUCCESS, the journal says so.
    [found] = interrupted_commits(open_store(str(dest)), str(dest))
    assert found.journal is not None and found.journal.state == State.RENAMING
    visible = data_files(dest)
    assert KILL_AFTER <= len(visible) < FILES, visible
    assert not (dest / "_SUCCESS").exists()

    cli = Path(sys.executable).parent / "manifest-committer"
    resumed = subprocess.run([str(cli), "resume", str(dest)], capture_output=True, text=True,
                             timeout=WAIT_S, check=False)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)

    assert len(data_files(dest)) == FILES
    assert not (dest / "_temporary").exists()
    doc = assert_ours(dest)
    assert doc["jobId"] == found.job_id == success(dest)["jobId"]
    assert doc["metrics"]["committer_files_committed"] == FILES
    df = spark.read.parquet(str(dest))
    got = df.selectExpr("count(*)", "count(distinct id)", "sum(id)", "count(distinct p)").first()
    assert tuple(got) == (ROWS, ROWS, ROWS * (ROWS - 1) // 2, PARTITIONS)
