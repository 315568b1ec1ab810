"""Crash safety and concurrency on both emulators (Azurite, fake-gcs-server).

Object stores rename by copy-then-delete and have no directories, so this is where moving
partitions aside, proving renamed files by their content checksum, and the lease's conditional
create (If-None-Match / ifGenerationMatch=0) meet real store semantics. Failures are injected
in-process here (a store call raises), at a named operation on a named path, never at the n-th
call of a run: concurrent calls reorder from run to run, so a count would land in another
stage each time. SIGKILL at every store call is covered on local disk by
``tests/committer/job/test_crash_recovery.py``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import pytest

from committer import CommitterConfig
from committer.errors import ManifestCommitterError, StoreError
from committer.job import JobCommitter, resume, rollback
from committer.job.durability.interrupted import interrupted_commits
from committer.layout import LOCK_DIR, JobLayout
from committer.store import ManagedStore, open_store
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from tests.emulator_fixtures import CloudTarget

pytestmark = pytest.mark.emulator

EXISTING = {"p=1/old.csv": b"old one", "p=2/old.csv": b"old two"}
FILES_A = {0: {"p=1/a0.csv": b"A0", "p=3/a1.csv": b"A1"}, 1: {"p=2/a2.csv": b"A2"}}
FILES_B = {0: {"p=1/b0.csv": b"B0"}, 1: {"p=4/b1.csv": b"B1", "p=1/b2.csv": b"B2"}}


def _prepare(store: ManagedStore, dest: str, job_id: str,
             files: Mapping[int, Mapping[str, bytes]]) -> dict[str, str]:
    JobCommitter(dest, job_id, config=store.config, store=store).setup()
    committed = {}
    for n, task_files in files.items():
        task_id, attempt_id = task_ids(job_id, n, 0)
        ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=store.config,
                                  store=store)
        ta.setup()
        for rel, data in task_files.items():
            with ta.open_output(rel) as out:
                out.write(data)
        ta.commit()
        committed[task_id] = attempt_id
    return committed


def _data(store: ManagedStore, dest: str) -> dict[str, bytes]:
    """Output as readers see it, plus whose ``_SUCCESS`` it is."""
    out = {}
    for status in store.walk_files(dest):
        rel = status.path[len(dest) + 1:]
        if rel.startswith("_"):
            continue
        out[rel] = store.read_bytes(status.path)
    return out


def _existing(store: ManagedStore, dest: str) -> None:
    for rel, data in EXISTING.items():
        store.write_bytes(f"{dest}/{rel}", data)


def _job(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def test_append_and_dynamic_overwrite_at_once_equal_a_serial_order(cloud: CloudTarget) -> None:
    store = cloud.managed()
    config = cloud.config(lock_mode="always")
    outcomes = []
    for order in ("ab", "ba", "both"):
        dest = cloud.url(f"table-{order}")
        _existing(store, dest)
        a, b = _job("a"), _job("b")
        tasks = {a: _prepare(store, dest, a, FILES_A), b: _prepare(store, dest, b, FILES_B)}
        specs = {a: False, b: True}  # job -> dynamic partition overwrite

        def commit(job: str, dest: str = dest, tasks: dict[str, dict[str, str]] = tasks,
                   specs: dict[str, bool] = specs) -> None:
            JobCommitter(dest, job, config=config, store=cloud.managed(lock_mode="always"),
                         dynamic_partition_overwrite=specs[job]).commit(tasks[job])

        if order == "both":
            errors: list[BaseException] = []

            def run(job: str, commit: Callable[[str], None] = commit,
                    errors: list[BaseException] = errors) -> None:
                try:
                    commit(job)
                except BaseException as e:  # reported by the assertion below
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(j,)) for j in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(600)  # (a bound for a hang, not a speed: each takes seconds)
            assert not any(t.is_alive() for t in threads) and errors == []
        else:
            for job in ((a, b) if order == "ab" else (b, a)):
                commit(job)
        outcomes.append(_data(store, dest))
        assert interrupted_commits(store, dest) == []
        assert len(list(store.walk_files(f"{dest}/{LOCK_DIR}"))) == 1  # one released lease
    a_then_b, b_then_a, concurrent = outcomes
    assert a_then_b != b_then_a
    assert concurrent in (a_then_b, b_then_a)


def _refusing_rename(cloud: CloudTarget, target: str, config: CommitterConfig
                     ) -> tuple[ManagedStore, list[str]]:
    """The emulator's own backend, whose store refuses the rename to ``target`` (a failure that
    is not transient: no retry), whether it comes alone or in a batch; every other call is
    made as it would be. Returns the managed store and the list of refused sources."""
    backend = cloud.backend()
    batch, single = backend.rename_batch, backend.rename_file
    refused: list[str] = []

    def refusal(src: str) -> StoreError:
        refused.append(src)
        return StoreError(f"injected: the store refused to rename {src} to {target}", src)

    def rename_file(src: str, dst: str) -> None:
        if dst == target:
            raise refusal(src)
        single(src, dst)

    def rename_batch(entries: Sequence[tuple[str, str, Any, Any]], start: int = 0
                     ) -> tuple[int, list[tuple[int, StoreError]]]:
        at = [i for i in range(start, len(entries)) if entries[i][1] == target]
        if not at:
            return batch(entries, start)
        others = [i for i in range(start, len(entries)) if i != at[0]]
        reached, failures = batch([entries[i] for i in others], 0)
        out = [(others[j], error) for j, error in failures]
        if reached == len(others):  # every other entry attempted: the refused one too
            return len(entries), [*out, (at[0], refusal(entries[at[0]][0]))]
        reached = others[reached - 1] + 1 if reached else start
        if at[0] < reached:
            out.append((at[0], refusal(entries[at[0]][0])))
        return reached, out

    backend.rename_file = rename_file  # type: ignore[method-assign]
    backend.rename_batch = rename_batch  # type: ignore[method-assign]
    return open_store(cloud.root, config, backend=backend), refused


def _strip_identities(store: ManagedStore, dest: str, job: str) -> None:
    """Rewrite the job's manifests without file identities (``e``), as Hadoop's task
    committer writes them: job commit must then record the sources' identities itself."""
    layout = JobLayout(dest, job)
    stripped = 0
    for status in store.list_dir(layout.manifests_dir):
        doc = orjson.loads(store.read_bytes(status.path))
        for entry in doc["files"]:
            stripped += entry.pop("e", None) is not None
        store.write_bytes(status.path, orjson.dumps(doc))
    assert stripped > 0


@pytest.mark.parametrize("identities", [True, False], ids=["etags", "no-etags"])
@pytest.mark.parametrize("action", ["rollback", "resume"])
def test_dynamic_overwrite_failed_mid_commit_then_recovered(cloud: CloudTarget, action: str,
                                                            identities: bool) -> None:
    store = cloud.managed()
    config = store.config
    # the reference: the same commit, uninterrupted
    ref_dest = cloud.url("reference")
    _existing(store, ref_dest)
    ref_job = _job("r")
    ref_tasks = _prepare(store, ref_dest, ref_job, FILES_B)
    if not identities:
        _strip_identities(store, ref_dest, ref_job)
    JobCommitter(ref_dest, ref_job, config=config, store=cloud.managed(),
                 dynamic_partition_overwrite=True).commit(ref_tasks)
    committed = _data(store, ref_dest)

    dest = cloud.url("table")
    _existing(store, dest)
    before = _data(store, dest)
    job = _job("j")
    tasks = _prepare(store, dest, job, FILES_B)
    if not identities:
        _strip_identities(store, dest, job)
    # mid-commit: the partitions replaced are moved aside, the files are being renamed, and
    # the store refuses one of them (the journal's saves all land: its state is determined)
    failing, refused = _refusing_rename(cloud, f"{dest}/p=1/b2.csv", config)
    with pytest.raises(ManifestCommitterError, match="refused to rename"):
        JobCommitter(dest, job, config=config, store=failing,
                     dynamic_partition_overwrite=True).commit(tasks)
    assert len(refused) == 1
    [found] = interrupted_commits(store, dest)
    assert found.journal is not None and found.state == "renaming"
    half = _data(store, dest)
    assert "p=1/b2.csv" not in half and "p=1/old.csv" not in half  # (moved aside)
    assert store.exists(refused[0])
    if action == "resume":
        resume(dest, job, config=config, store=cloud.managed())
        assert _data(store, dest) == committed
    else:
        rollback(dest, job, config=config, store=cloud.managed())
        assert _data(store, dest) == before
    assert interrupted_commits(store, dest) == []
