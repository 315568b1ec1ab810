"""Resume, rollback and abort of commits that failed in-process (the fast suite's share of the
crash tests: a store call raises instead of the process being killed).

The failure is placed on one file's rename (a file of a partition two tasks write, so it is
renamed on its own, never within a directory moved whole): where it lands in the commit does
not depend on how the commit's threads interleave, as a count of store calls would."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from committer.errors import FormatError, JobConflictError, ManifestCommitterError
from committer.job import resume, rollback
from committer.job.durability.interrupted import interrupted_commits
from committer.job.durability.journal import load_journal
from committer.store import ManagedStore, open_store
from manifest_schema.journal import State
from tests.committer.helpers import fast_config
from tests.committer.job import crash_scenario as cs


class Boom(ManifestCommitterError):
    """The injected failure."""


#: the file whose rename into the destination fails: task 1's in ``p=1``, which task 0 writes
#: into too
FAILING_RENAME = "/dest/p=1/new-1a.csv"


class _FailingRename(cs.CountingLocalStore):
    """Local disk whose rename of ``FAILING_RENAME`` into the destination fails."""

    def rename_file(self, src: str, dst: str) -> None:
        if dst.endswith(FAILING_RENAME):
            raise Boom(f"injected failure renaming {src} to {dst}")
        super().rename_file(src, dst)


def _commit_failing_mid_rename(root: Path, mode: str) -> None:
    store = open_store(str(cs.dest_of(root)), fast_config(), backend=_FailingRename())
    with pytest.raises(ManifestCommitterError, match="injected failure renaming"):
        cs.committer_for(root, mode, store).commit(cs.committed_tasks())


def _reference(tmp: Path, mode: str) -> tuple[dict[str, object], dict[str, object]]:
    """The destination before the job, and after its uninterrupted commit."""
    root = tmp / f"reference-{mode}"
    before = cs.build(root, mode)
    store = ManagedStore(cs.CountingLocalStore(), fast_config())
    cs.committer_for(root, mode, store).commit(cs.committed_tasks())
    return before, cs.snapshot(root)


def _state(root: Path) -> State | None:
    found = interrupted_commits(open_store(str(cs.dest_of(root))), str(cs.dest_of(root)))
    return found[0].journal.state if found and found[0].journal else None


@pytest.mark.parametrize("mode", cs.MODES)
def test_failed_mid_rename_then_abort_restores_everything(tmp_path: Path, mode: str) -> None:
    before, _committed = _reference(tmp_path, mode)
    root = tmp_path / "run"
    cs.build(root, mode)
    _commit_failing_mid_rename(root, mode)
    assert _state(root) == State.RENAMING
    cs.committer_for(root, mode).abort()
    assert cs.snapshot(root) == before
    assert not (cs.dest_of(root) / "_temporary").exists()


@pytest.mark.parametrize("mode", cs.MODES)
def test_failed_mid_rename_then_resume_finishes_it(tmp_path: Path, mode: str) -> None:
    _before, committed = _reference(tmp_path, mode)
    root = tmp_path / "run"
    cs.build(root, mode)
    _commit_failing_mid_rename(root, mode)
    found = interrupted_commits(open_store(str(cs.dest_of(root))), str(cs.dest_of(root)))
    assert "rename the rest" in found[0].resume_would()
    assert "move up to 9 renamed file(s) back" in found[0].rollback_would()
    summary = resume(str(cs.dest_of(root)), config=fast_config())
    assert summary.job_id == cs.JOB_ID and summary.success
    assert cs.snapshot(root) == committed


def test_resume_refuses_a_manifest_that_changed(tmp_path: Path) -> None:
    root = tmp_path / "run"
    cs.build(root, "append")
    _commit_failing_mid_rename(root, "append")
    assert _state(root) == State.RENAMING
    manifests = next((cs.dest_of(root) / "_temporary").rglob("manifests"))
    victim = sorted(manifests.iterdir())[0]
    victim.write_bytes(victim.read_bytes())  # same bytes, rewritten: a new object
    with pytest.raises(JobConflictError, match="changed since the commit was planned"):
        resume(str(cs.dest_of(root)), cs.JOB_ID, config=fast_config())
    # rollback is still possible: it works from the destinations' etags
    rollback(str(cs.dest_of(root)), cs.JOB_ID, config=fast_config())
    assert not (cs.dest_of(root) / "_temporary").exists()


def test_static_overwrite_aborted_before_commit_puts_the_data_back(tmp_path: Path) -> None:
    root = tmp_path / "run"
    before = cs.build(root, "static")
    dest = cs.dest_of(root)
    assert sorted(p.name for p in dest.iterdir()) == ["_manifest_committer", "_temporary"]
    [found] = interrupted_commits(open_store(str(dest)), str(dest))
    assert found.state == "not_started" and found.mode == "static-overwrite"
    assert "restore 1 moved-aside path(s)" in found.rollback_would()
    cs.committer_for(root, "static").abort()
    assert cs.snapshot(root) == before


def test_past_the_point_of_no_return_rollback_refuses_and_abort_finishes(
        tmp_path: Path) -> None:
    _before, committed = _reference(tmp_path, "dynamic")
    root = tmp_path / "run"
    cs.build(root, "dynamic")
    # fail on the first delete of the cleanup stage, after the journal says 'cleaning'
    dest = cs.dest_of(root)

    class FailCleanup(cs.CountingLocalStore):
        def delete_tree(self, path: str) -> bool:
            journal = load_journal(open_store(str(dest)), cs.committer_for(root, "dynamic")
                                   .layout)
            if journal is not None and journal.state == State.CLEANING:
                raise Boom("cleanup failed")
            return super().delete_tree(path)

    store = open_store(str(dest), fast_config(), backend=FailCleanup())
    cs.committer_for(root, "dynamic", store).commit(cs.committed_tasks())  # committed anyway
    assert _state(root) == State.CLEANING
    with pytest.raises(JobConflictError, match="cannot be rolled back"):
        rollback(str(dest), config=fast_config())
    cs.committer_for(root, "dynamic").abort()
    assert cs.snapshot(root) == committed
    assert not (dest / "_temporary").exists()


def test_a_damaged_journal_is_reported_not_guessed_at(tmp_path: Path) -> None:
    root = tmp_path / "run"
    cs.build(root, "append")
    _commit_failing_mid_rename(root, "append")
    layout = cs.committer_for(root, "append").layout
    path = Path(layout.journal)
    doc = orjson.loads(path.read_bytes())
    doc["state"] = "halfway"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(FormatError, match="halfway"):
        load_journal(open_store(str(cs.dest_of(root))), layout)
