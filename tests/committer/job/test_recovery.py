"""Resume, rollback and abort of commits that failed in-process (the fast suite's share of the
crash tests: a store call raises instead of the process being killed)."""

from __future__ import annotations

from collections.abc import Callable
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


def failing_after(n: int) -> Callable[[int], None]:
    def before(op: int) -> None:
        if op > n:
            raise Boom(f"injected failure at store call {op}")

    return before


def _commit_failing(root: Path, mode: str, n: int) -> None:
    store = open_store(str(cs.dest_of(root)), fast_config(),
                       backend=cs.CountingLocalStore(failing_after(n)))
    with pytest.raises(ManifestCommitterError):
        cs.committer_for(root, mode, store).commit(cs.committed_tasks())


def _ops(tmp: Path, mode: str) -> tuple[dict[str, object], dict[str, object], int]:
    root = tmp / f"reference-{mode}"
    before = cs.build(root, mode)
    counting = cs.CountingLocalStore()
    store = ManagedStore(counting, fast_config())
    cs.committer_for(root, mode, store).commit(cs.committed_tasks())
    return before, cs.snapshot(root), counting.ops


def _state(root: Path) -> State | None:
    found = interrupted_commits(open_store(str(cs.dest_of(root))), str(cs.dest_of(root)))
    return found[0].journal.state if found and found[0].journal else None


@pytest.mark.parametrize("mode", cs.MODES)
def test_failed_mid_rename_then_abort_restores_everything(tmp_path: Path, mode: str) -> None:
    before, _committed, ops = _ops(tmp_path, mode)
    root = tmp_path / "run"
    cs.build(root, mode)
    _commit_failing(root, mode, ops * 2 // 3)
    assert _state(root) in (State.RENAMING, State.RENAMED)
    cs.committer_for(root, mode).abort()
    assert cs.snapshot(root) == before
    assert not (cs.dest_of(root) / "_temporary").exists()


@pytest.mark.parametrize("mode", cs.MODES)
def test_failed_mid_rename_then_resume_finishes_it(tmp_path: Path, mode: str) -> None:
    _before, committed, ops = _ops(tmp_path, mode)
    root = tmp_path / "run"
    cs.build(root, mode)
    _commit_failing(root, mode, ops * 2 // 3)
    found = interrupted_commits(open_store(str(cs.dest_of(root))), str(cs.dest_of(root)))
    assert "rename the rest" in found[0].resume_would()
    assert "move up to 9 renamed file(s) back" in found[0].rollback_would()
    summary = resume(str(cs.dest_of(root)), config=fast_config())
    assert summary.job_id == cs.JOB_ID and summary.success
    assert cs.snapshot(root) == committed


def test_resume_refuses_a_manifest_that_changed(tmp_path: Path) -> None:
    _before, _committed, ops = _ops(tmp_path, "append")
    root = tmp_path / "run"
    cs.build(root, "append")
    _commit_failing(root, "append", ops // 2)
    assert _state(root) is not None and _state(root) >= State.PLANNED  # type: ignore[operator]
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
    _before, committed, _ = _ops(tmp_path, "dynamic")
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
    _before, _committed, ops = _ops(tmp_path, "append")
    root = tmp_path / "run"
    cs.build(root, "append")
    _commit_failing(root, "append", ops // 2)
    layout = cs.committer_for(root, "append").layout
    path = Path(layout.journal)
    doc = orjson.loads(path.read_bytes())
    doc["state"] = "halfway"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(FormatError, match="halfway"):
        load_journal(open_store(str(cs.dest_of(root))), layout)
