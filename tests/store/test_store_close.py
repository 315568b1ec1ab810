"""The cloud backends close their connection pools: no unclosed connection at exit.

asyncio warns ("unclosed transport", a ResourceWarning) for every connection it collects open.
The backends register the pools they open with ``AsyncResources``: ``close()`` closes them, a
collected store is closed by its finalizer, and whatever is still open at interpreter exit is
closed by an exit hook while the request loop still runs. The subprocess test does what a user's
script does (open stores, rename, run a job commit, exit without closing anything) on every
cloud path: Azurite (copy + delete), the ADLS Gen2 stub (Data Lake client), fake-gcs-server
(rewrite) and the moveTo proxy (move), and reads the interpreter's stderr.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import weakref

import pytest

from committer.store.azure import AzureStore
from committer.testing.emulators import RunningEmulator
from tests.store.stub_fixtures import AdlsTarget, GcsMoveTarget

SCRIPT = r"""
import gc, json, os, sys, uuid
from committer import JobCommitter, TaskAttemptCommitter, task_ids
from committer.config import CommitterConfig
from committer.store import open_store
from committer.testing.adls_stub import adls_stub
from committer.testing.gcs_move_proxy import gcs_move_proxy

def exercise(root, options):
    config = CommitterConfig(storage_options=options)
    store = open_store(root, config)
    store.mkdirs(root)
    store.write_bytes(root + "/in/f", b"x")
    store.rename_file(root + "/in/f", root + "/out/f")
    assert store.read_bytes(root + "/out/f") == b"x"
    # the committers open stores of their own and close none of them
    dest, job_id = root + "/table", "j" + uuid.uuid4().hex[:8]
    JobCommitter(dest, job_id, config=config).setup()
    task, attempt = task_ids(job_id, 0)
    ta = TaskAttemptCommitter(dest, job_id, task, attempt, config=config)
    ta.setup()
    with ta.open_output("p=1/part-0.csv") as out:
        out.write(b"a\n")
    ta.commit()
    JobCommitter(dest, job_id, config=config).commit({task: attempt})
    return store

targets = json.loads(os.environ["COMMITTER_TEST_TARGETS"])
kept = []
gcs = os.environ["COMMITTER_TEST_GCS"]
with adls_stub(hierarchical=True) as adls, gcs_move_proxy(gcs) as moves:
    targets += [["abfs://hns", adls.storage_options], ["gs://moves", moves.storage_options]]
    for root, options in targets:
        kept.append(exercise(root, options))  # still open at exit
        dropped = exercise(root + "-dropped", options)  # collected mid-run
        del dropped
        gc.collect()
    assert adls.ops().count("dfs_rename") >= 2 and moves.ops().count("move") >= 2
print("exercised", len(targets))
"""


@pytest.mark.emulator
def test_no_unclosed_session_warnings_at_exit(azurite_emulator: RunningEmulator,
                                              gcs_emulator: RunningEmulator) -> None:
    env = dict(os.environ)
    env["COMMITTER_TEST_TARGETS"] = json.dumps([
        ["abfs://flat", azurite_emulator.storage_options],
        ["gs://rewrites", gcs_emulator.storage_options],
    ])
    env["COMMITTER_TEST_GCS"] = gcs_emulator.endpoint
    # ResourceWarnings shown too: an unclosed session is then reported twice over
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", SCRIPT],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "exercised 4" in done.stdout
    assert "Unclosed" not in done.stderr, done.stderr
    assert "unclosed" not in done.stderr.lower(), done.stderr


def test_close_releases_everything_and_the_store_reopens(adls: AdlsTarget) -> None:
    store = adls.backend()
    store.mkdirs(adls.url("d"))  # the Blob and the Data Lake endpoint: a pool each
    pools = store.resources
    assert store.open_resources == 2 and all(p.open_connections for p in pools)
    store.close()
    assert store.open_resources == 0
    assert all(p.closed and not p.open_connections for p in pools)
    store.close()  # twice is fine
    store.write_bytes(adls.url("d", "f"), b"1")  # used again: opens anew
    assert store.open_resources == 1 and store.resources[0] not in pools
    store.close()
    assert store.open_resources == 0


def test_collected_store_closes_its_pools(adls: AdlsTarget) -> None:
    store: AzureStore | None = adls.backend()
    assert store is not None
    store.write_bytes(adls.url("f"), b"1")
    [pool] = store.resources
    pool_ref = weakref.ref(pool)
    adls.opened.clear()  # the fixture would close it; this test lets it be collected
    del store
    gc.collect()
    deadline = time.monotonic() + 60  # (a bound for a hang: closed on the loop's thread)
    while time.monotonic() < deadline:
        found = pool_ref()
        if found is None or found.closed:
            break
        time.sleep(0.01)
    found = pool_ref()
    assert found is None or found.closed


@pytest.mark.emulator
def test_gcs_store_close(gcs_move: GcsMoveTarget) -> None:
    store = gcs_move.backend()
    store.write_bytes(gcs_move.url("f"), b"1")
    [pool] = store.resources
    assert store.open_resources == 1
    store.close()
    assert store.open_resources == 0 and pool.closed
    assert store.read_bytes(gcs_move.url("f")) == b"1"
    store.close()
