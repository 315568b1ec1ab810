"""The cloud-peers suite end to end on a tiny job: this engine and the Python clients commit the
same job on a simulated account, each from the same starting state, each checked file by file,
and the report and plot come out."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks import cloud_peers

# obstore has no build for Python 3.10 (pyproject.toml installs it from 3.11 on): its row is
# left out there, the others still run
OBSTORE = importlib.util.find_spec("obstore") is not None


def _args(tmp_path: Path, service: str, rows: str) -> argparse.Namespace:
    return argparse.Namespace(
        service=service, files=200, tasks=4, partitions=7, latency_ms=1.0, p99_ms=10.0,
        ops_limit=0.0, rows=rows, fsspec_forms="bulk", pool_threads=8,
        obstore_concurrency=32, obstore_retries=None, json=tmp_path / "peers.json",
        out=tmp_path)


def test_the_engine_and_the_python_clients_each_leave_the_destination_exact(
        tmp_path: Path) -> None:
    args = _args(tmp_path, "blob", "engine,engine-account-rate,fsspec" + (",obstore" * OBSTORE))
    args.ops_limit = 50_000.0  # high enough not to throttle: the tuned engine's cap
    result = cloud_peers.run(args)
    saved = json.loads((tmp_path / "peers.json").read_text())
    assert list(saved["rows"]) == ["engine", "engine-account-rate", "fsspec-bulk",
                                   *(["obstore"] * OBSTORE)]
    for name, row in saved["rows"].items():
        assert "error" not in row, (name, row.get("error"))
        assert row["destination_exact"], (name, row["examples"])
        assert row["missing"] == row["sources_left"] == row["extra"] == 0
        # each row moved the 200 files itself: the account was reset before it
        assert row["requests"] >= 200 and row["wall_s"] > 0 and row["cpu_s"] > 0
        assert row["files_per_s"] > 0 and row["machine_bound_term"]
    assert saved["rows"]["engine"]["vs_engine"] == 1.0
    # the default engine's static cap, and the tuned one's at the account's limit
    assert saved["rows"]["engine"]["rate_limit"] == 20_000
    assert saved["rows"]["engine-account-rate"]["rate_limit"] == 50_000
    assert saved["rows"]["engine-account-rate"]["vs_engine_account_rate"] == 1.0
    assert all("vs_engine_account_rate" in row for row in saved["rows"].values())
    assert saved["rows"]["engine"]["stages"]  # the engine's stage timings, for the timeline
    text = cloud_peers.report(result)
    assert "fsspec-bulk" in text and "machine bound" in text
    assert ("obstore" in text) == OBSTORE
    assert "engine-account-rate's" in text
    assert list(tmp_path.glob("cloud_peers_blob_200.png"))


@pytest.mark.skipif(not OBSTORE, reason="obstore has no build for this Python (3.11+)")
def test_obstore_runs_with_the_retries_it_is_given(tmp_path: Path) -> None:
    """``--obstore-retries``: obstore's own retries gave up on a throttled Blob Batch at a
    million files; the row says which it ran with."""
    args = _args(tmp_path, "gcs", "obstore")
    args.obstore_retries = 30
    saved = cloud_peers.run(args)["rows"]["obstore"]
    assert "error" not in saved and saved["destination_exact"]
    assert "max_retries 30" in saved["how"]


def test_unknown_rows_are_refused_by_name(tmp_path: Path) -> None:
    try:
        cloud_peers.run(_args(tmp_path, "blob", "engine,spark"))
    except SystemExit as e:
        assert "spark" in str(e)
    else:
        raise AssertionError("an unknown row was accepted")


def test_a_failed_row_is_reported_by_the_line_naming_its_exception() -> None:
    """A child's traceback whose text was cut inside a client's debug dump: the report names
    the exception's line, not the fragment the text ends with."""
    error = ("RuntimeError: clients.py failed (1):\nTraceback (most recent call last):\n"
             '  File "clients.py", line 101, in delete\n'
             "obstore.exceptions.GenericError: Generic MicrosoftAzure error: 503 ServerBusy\n"
             "Debug source:\nGeneric {\n    retries: 10,\n    m")
    assert cloud_peers._last_line(error).startswith("obstore.exceptions.GenericError: ")
    assert cloud_peers._last_line("Traceback:\n  x\nValueError: no") == "ValueError: no"
    assert cloud_peers._last_line("one line") == "one line"
