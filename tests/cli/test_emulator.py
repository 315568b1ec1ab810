"""The CLI against a cloud store: fake-gcs-server (``gs://``), through the real console script.

The job is written by the engine's own task side into the emulator; the CLI then inspects,
validates, reports status, commits and inspects ``_SUCCESS`` there, with credentials and the
endpoint passed as ``--storage-option`` exactly as a user would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.cli.conftest import check_golden, run

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # see committer.cli.paths

from committer import CommitterConfig, JobCommitter, TaskAttemptCommitter, task_ids
from committer.testing.emulators import (
    EmulatorError,
    RunningEmulator,
    fake_gcs_server,
)

pytestmark = pytest.mark.emulator

DEST = "gs://cli-bucket/table"


@pytest.fixture(scope="module")
def gcs() -> Iterator[RunningEmulator]:
    try:
        with fake_gcs_server() as emu:
            import gcsfs

            gcsfs.GCSFileSystem(**emu.storage_options).mkdir("cli-bucket")
            yield emu
    except EmulatorError as e:
        pytest.skip(f"fake-gcs-server unavailable: {e}")


def _options(emu: RunningEmulator) -> list[str]:
    out: list[str] = []
    for k, v in emu.storage_options.items():
        out += ["--storage-option", f"{k}={v}"]
    return out


def _write_job(emu: RunningEmulator, job_id: str) -> None:
    config = CommitterConfig(storage_options=emu.storage_options)
    JobCommitter(DEST, job_id, config=config).setup()
    for n, payload in enumerate((b"x" * 10, b"y" * 11)):
        task_id, attempt_id = task_ids(job_id, n)
        ta = TaskAttemptCommitter(DEST, job_id, task_id, attempt_id, config=config)
        ta.setup()
        ta.store.write_bytes(ta.output_path(f"p={n}/part-{n:05d}.csv"), payload)
        ta.commit()


def test_cli_on_fake_gcs_server(gcs: RunningEmulator) -> None:
    _write_job(gcs, "gjob")
    opts = _options(gcs)
    attempt = f"{DEST}/_temporary/manifest_gjob/00"

    r = run("inspect", attempt, "--json", *opts, timeout=120)
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["kind"], doc["tasks"], doc["files"], doc["bytes"]) == (
        "job-attempt-directory", 2, 2, 21)
    assert doc["destination"] == DEST
    assert r.err == ""  # no stray warnings (gcsfs/aiohttp) for a successful run

    v = run("validate", attempt, *opts, timeout=120)
    assert v.code == 0, v.out + v.err
    assert "store checked: sources" in v.err

    s = run("status", DEST, "--json", *opts, timeout=120).json()
    assert [(j["job_id"], j["state"], j["manifests"]) for j in s["jobs"]] == [
        ("gjob", "in-progress", 2)]

    c = run("commit-job", DEST, "--job-id", "gjob", "--json", *opts, timeout=120)
    assert c.code == 0, c.err
    assert (c.json()["files"], c.json()["bytes"]) == (2, 21)
    # what the commit sent up to _SUCCESS, and its races (at most 5% of the requests)
    requests = c.json()["requests"]
    assert requests["store_io_request"] > 2
    assert requests["store_io_request_raced"] <= 0.05 * requests["store_io_request"]
    assert requests["store_io_request_raced"] == (requests["store_io_request_race_won"]
                                                  + requests["store_io_request_race_wasted"])

    success = run("inspect", f"{DEST}/_SUCCESS", "--json", *opts, timeout=120)
    assert success.code == 0, success.err
    check_golden("emulator-gcs-success", {k: v for k, v in success.json().items()
                                          if k != "iostatistics"}, None)

    missing = run("inspect", f"{DEST}/no-such-thing", *opts, timeout=120)
    assert missing.code == 2 and len(missing.err.splitlines()) == 1


def test_cli_commit_summary_counts_the_requests_and_races(gcs: RunningEmulator) -> None:
    _write_job(gcs, "gjob2")
    c = run("commit-job", DEST, "--job-id", "gjob2", *_options(gcs), timeout=120)
    assert c.code == 0, c.err
    assert "Requests (up to _SUCCESS)" in c.out
    for name in ("store_io_request", "store_io_request_raced", "store_io_request_race_won",
                 "store_io_request_race_wasted"):
        assert name in c.out
