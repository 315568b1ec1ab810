"""The core's store-generic tests, run on the emulators and on the stubs' rename paths.

Every test function in the modules below that takes the ``store_target`` fixture is collected
here too (imported, not copied): in ``tests/committer`` it runs on local disk; here pytest gives
it this directory's ``store_target`` (``conftest.py``, ``targets.py``): in turn Azurite
(``azurite``: Copy Blob + Delete), fake-gcs-server (``gcs``: rewrite + delete), the ADLS Gen2
stub with a hierarchical namespace (``adls-hns``: the Data Lake rename), fake-gcs-server
behind the move proxy (``gcs-move``: ``moveTo``), and the scale benchmark's simulated account
in its three kinds (``sim-adls``, ``sim-blob``, ``sim-gcs``: the simulation must answer the
engine as the emulators and the stubs do); every destination and every hypothesis example in
fresh buckets. A new store-generic test in those modules runs on all seven without being
listed anywhere. On the two stub targets the fixture fails a test whose renames took the
fallback path, and ``test_stub_targets_rename_on_their_own_path`` counts the special renames.

- ``test_protocol_properties``: random protocol histories (task retries, duplicate and
  speculative attempts, aborts, zombies committing late, store faults) against the five
  properties, with fewer examples than on local disk (the ``emulator_examples`` of each test);
- ``task/test_attempt``: task setup, commit (the manifest, file identities), abort, awkward
  names, zombies refused after job commit;
- ``job/test_job_commit``: job commit, abort, ``_SUCCESS``, duplicate destinations refused
  before anything moves, existing files (never replaced unless ``delete.target.files``),
  dynamic partition overwrite, output validation, cleanup, progress and statistics.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from committer.store.base import Store
from manifest_schema.uris import uri_to_location
from tests.committer import test_protocol_properties
from tests.committer.job import test_job_commit
from tests.committer.task import test_attempt
from tests.store.targets import EmulatorTarget

pytestmark = pytest.mark.emulator

MODULES = (test_protocol_properties, test_attempt, test_job_commit)


def store_generic_tests(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """The test functions of ``module`` that take the ``store_target`` fixture."""
    return {name: fn for name, fn in vars(module).items()
            if name.startswith("test_") and inspect.isfunction(fn)
            and "store_target" in inspect.signature(fn).parameters}


COLLECTED: dict[str, Callable[..., Any]] = {}
for _module in MODULES:
    for _name, _test in store_generic_tests(_module).items():
        assert _name not in COLLECTED, f"two store-generic tests named {_name}"
        COLLECTED[_name] = _test
globals().update(COLLECTED)


def test_the_core_suites_are_collected_here() -> None:
    """Guard against the import above silently collecting nothing (a renamed fixture)."""
    assert len(store_generic_tests(test_protocol_properties)) >= 3
    assert len(store_generic_tests(test_attempt)) >= 7
    assert len(store_generic_tests(test_job_commit)) >= 20


@pytest.mark.parametrize("store_target", ["adls-hns", "gcs-move"], indirect=True)
def test_stub_targets_rename_on_their_own_path(store_target: EmulatorTarget) -> None:
    """On ``adls-hns`` every rename of a job commit is one Data Lake rename (keeping the etag
    the manifest recorded), on ``gcs-move`` one ``moveTo`` (keeping the checksum): the stub's
    request log shows them, one per file, and no copy or rewrite (the fixture checks that).
    (File by file here: ``test_adls_rename.py`` covers the directory fast path.)"""
    t = store_target
    assert t.rename_path is not None
    dest = t.new_dest()
    files = {"p=1/a.csv": b"a", "p=2/q=ü #/b.csv": b"bb", "c.csv": b"ccc"}
    config = t.config(rename_directories=False)
    job = t.new_job(dest, config=config)
    ta = t.task_attempt(dest, 0, 0, files, config=config)
    manifest = ta.commit()
    before = len(t.rename_path.renames())
    summary = job.commit({ta.task_id: ta.task_attempt_id})
    # the recorded path of a Data Lake rename is its destination; of a move, it ends with it
    renamed = [r.path for r in t.rename_path.renames()[before:]]
    dest_key = dest.split("://", 1)[1].split("/", 1)[1]
    for rel in files:  # a rename raced by a copy in the latency tail is sent twice
        assert 1 <= sum(p.endswith(f"/{dest_key}/{rel}") for p in renamed) <= 2, (rel, renamed)
    assert summary.iostatistics.counters["op_rename"] == len(files)
    assert t.visible_files(dest) == files
    backend: Store = t.backend()
    for entry in manifest.files:  # the identity the task recorded still names the file
        status = backend.stat(uri_to_location(entry.dest))
        assert status.size == entry.size
        assert entry.etag == backend.identity(status)
        if t.kind == "adls-hns":
            assert status.etag == entry.etag  # the rename kept the etag
