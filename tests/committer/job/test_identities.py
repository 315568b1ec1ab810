"""Manifests without file identities (``e``), as Hadoop's task committer writes them: job commit
records each source's identity before anything moves, so an interrupted commit can still be
resumed or rolled back exactly, and a file it cannot attribute to the job is never taken."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from committer import statistics as st
from committer.errors import (
    AmbiguousRenameError,
    CommitFailedError,
    ManifestCommitterError,
    StoreError,
    UntrustedManifestError,
)
from committer.job import JobCommitter, resume, rollback
from committer.job.durability.interrupted import interrupted_commits
from committer.layout import JobLayout
from committer.store import open_store
from committer.store.base import Store
from committer.store.faults import FaultInjectingStore, FaultPlan
from committer.store.local import LocalStore
from committer.task.attempt import task_ids
from manifest_schema.identities import SourceIdentities
from tests.committer.helpers import (
    JOB_ID,
    fast_config,
    new_job,
    strip_identities,
    task_attempt,
    tree,
)

TASKS = {
    0: {"p=1/a.csv": b"a" * 5, "p=2/b.csv": b"b" * 6, "top.csv": b"t"},
    1: {"p=1/c.csv": b"c" * 7, "p=3/q=1/d.csv": b"d" * 8},
    2: {"p=2/e.csv": b"e" * 9, "p=3/q=2/f.csv": b""},
}
EXISTING = {"p=1/old.csv": b"old", "keep.csv": b"keep"}


class Died(ManifestCommitterError):
    """Stands for the process dying: nothing in the engine handles it."""


class DiesAfterRenames(LocalStore):
    """Local disk whose job commit "dies" after ``n`` renames into the destination."""

    rename_batch = Store.rename_batch  # one rename_file per entry, so the count is exact
    renames_directories = False  # every file through rename_file (no whole-directory moves)

    def __init__(self, n: int) -> None:
        self.left = n

    def rename_file(self, src: str, dst: str) -> None:
        if "/_temporary/" not in dst and "/_manifest_committer/" not in dst \
                and not dst.endswith("_SUCCESS"):
            if self.left == 0:
                raise Died(f"killed before renaming {src}")
            self.left -= 1
        super().rename_file(src, dst)


def _stage(dest: Path, *, identities: bool = False) -> dict[str, str]:
    for rel, data in EXISTING.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    new_job(dest)
    committed = {}
    for t, files in TASKS.items():
        ta = task_attempt(dest, t, 0, files)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    if not identities:
        assert strip_identities(JobLayout(str(dest), JOB_ID).manifests_dir) == 7
    return committed


def _data(dest: Path) -> dict[str, bytes | None]:
    return {rel: data for rel, data in tree(dest).items()
            if not rel.startswith(("_temporary", "_manifest_committer", "_SUCCESS"))}


def _expected(tmp_path: Path) -> dict[str, bytes | None]:
    dest = tmp_path / "reference"
    dest.mkdir()
    committed = _stage(dest)
    JobCommitter(str(dest), JOB_ID, config=fast_config()).commit(committed)
    return _data(dest)


def _interrupted(dest: Path, renames: int, **config: Any) -> dict[str, str]:
    """Stage the job, then commit it until it "dies" after ``renames`` renames; the
    committed tasks."""
    committed = _stage(dest)
    before = _data(dest)
    cfg = fast_config(**config)
    store = open_store(str(dest), cfg, backend=DiesAfterRenames(renames))
    with pytest.raises(CommitFailedError) as info:
        JobCommitter(str(dest), JOB_ID, config=cfg, store=store).commit(committed)
    assert isinstance(info.value.__cause__, Died)
    [found] = interrupted_commits(open_store(str(dest)), str(dest))
    assert found.state == "renaming"
    assert _data(dest) != before
    return committed


@pytest.mark.parametrize("renames", [1, 4, 6])
def test_interrupted_commit_without_etags_resumes_exactly(tmp_path: Path, dest: Path,
                                                          renames: int) -> None:
    want = _expected(tmp_path)
    _interrupted(dest, renames)
    resume(str(dest), JOB_ID, config=fast_config())
    assert _data(dest) == want
    assert orjson.loads((dest / "_SUCCESS").read_bytes())["jobId"] == JOB_ID
    assert not (dest / "_temporary").exists()


@pytest.mark.parametrize("renames", [1, 4, 6])
def test_interrupted_commit_without_etags_rolls_back_exactly(dest: Path, renames: int) -> None:
    _interrupted(dest, renames)
    report = rollback(str(dest), JOB_ID, config=fast_config())
    assert report.files_restored == renames and report.problems == []
    assert _data(dest) == {"p=1/": None, **EXISTING}
    assert not (dest / "_temporary").exists()


def test_identities_are_recorded_before_the_plan(dest: Path) -> None:
    committed = _interrupted(dest, 0, cleanup_skipped=True)
    layout = JobLayout(str(dest), JOB_ID)
    files = sorted(Path(layout.identities_dir).iterdir())
    assert [f.name for f in files] == [Path(layout.identities_path(0)).name]  # one file for all
    record = SourceIdentities.loads(files[0].read_bytes(), str(files[0]))
    assert record.job_id == JOB_ID
    recorded = record.files
    assert sorted(recorded) == sorted(f"{committed[task_ids(JOB_ID, t, 0)[0]]}/{rel}"
                                      for t, files in TASKS.items() for rel in files)
    for path, (size, ident) in recorded.items():
        status = LocalStore().stat(f"{layout.tasks_dir}/{path}")
        assert (status.size, status.etag) == (size, ident)


def test_manifests_with_etags_record_nothing(dest: Path) -> None:
    committed = _stage(dest, identities=True)
    walked: list[str] = []

    class Watching(LocalStore):
        def walk_files(self, root: str) -> Any:
            walked.append(root)
            return super().walk_files(root)

    cfg = fast_config(cleanup_skipped=True)
    JobCommitter(str(dest), JOB_ID, config=cfg,
                 store=open_store(str(dest), cfg, backend=Watching())).commit(committed)
    assert walked == []
    assert not Path(JobLayout(str(dest), JOB_ID).identities_dir).exists()


def test_a_rename_that_timed_out_after_happening_is_recovered_without_etags(dest: Path) -> None:
    committed = _stage(dest)
    store = open_store(str(dest), fast_config(),
                       backend=FaultInjectingStore(LocalStore(), FaultPlan(after_rate=0.5)))
    summary = JobCommitter(str(dest), JOB_ID, config=fast_config(), store=store).commit(committed)
    assert summary.iostatistics.counters[st.RENAME_RECOVERED] > 0
    assert summary.metrics["committer_files_committed"] == 7


def _replace_with_another_writers_file(path: Path) -> None:
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)  # same name, same bytes, another file (another inode)


def test_resume_does_not_take_another_writers_file_for_its_own(dest: Path) -> None:
    _interrupted(dest, 4)
    placed = sorted(p for p in dest.rglob("*.csv")
                    if "_temporary" not in p.parts and p.name not in ("old.csv", "keep.csv"))
    assert len(placed) == 4
    _replace_with_another_writers_file(placed[0])
    with pytest.raises(CommitFailedError) as info:
        resume(str(dest), JOB_ID, config=fast_config())
    assert isinstance(info.value.__cause__, AmbiguousRenameError)
    assert str(placed[0]) in str(info.value)
    assert not (dest / "_SUCCESS").exists()


def test_rollback_leaves_another_writers_file_and_names_it(dest: Path) -> None:
    _interrupted(dest, 4)
    placed = sorted(p for p in dest.rglob("*.csv")
                    if "_temporary" not in p.parts and p.name not in ("old.csv", "keep.csv"))
    _replace_with_another_writers_file(placed[0])
    with pytest.raises(CommitFailedError, match="cannot be proven") as info:
        rollback(str(dest), JOB_ID, config=fast_config())
    assert str(placed[0]) in str(info.value)
    assert placed[0].exists()  # not ours to move or delete
    assert all(not p.exists() for p in placed[1:])  # ours went back


def test_a_source_changed_after_the_listing_is_not_accepted(dest: Path) -> None:
    """The source is rewritten between the listing and its rename, and the rename then "times
    out" after happening: the destination is not the file that was identified."""
    committed = _stage(dest)

    class ChangesThenTimesOut(LocalStore):
        rename_batch = Store.rename_batch
        done = False

        def rename_file(self, src: str, dst: str) -> None:
            if not self.done and "/tasks/" in src and "/_temporary/" not in dst:
                self.done = True
                data = Path(src).read_bytes()
                os.unlink(src)
                Path(src).write_bytes(data)  # same size and bytes, another file
                super().rename_file(src, dst)
                raise StoreError(f"timed out: {src}", src)
            super().rename_file(src, dst)

    class Transient(ChangesThenTimesOut):
        def rename_file(self, src: str, dst: str) -> None:
            try:
                super().rename_file(src, dst)
            except StoreError as e:
                from committer.errors import TransientStoreError

                if "timed out" in str(e):
                    raise TransientStoreError(str(e), src) from None
                raise

    store = open_store(str(dest), fast_config(), backend=Transient())
    with pytest.raises(CommitFailedError) as info:
        JobCommitter(str(dest), JOB_ID, config=fast_config(), store=store).commit(committed)
    assert isinstance(info.value.__cause__, AmbiguousRenameError)


@pytest.mark.parametrize("damage", ["missing", "resized"])
def test_a_source_missing_or_resized_before_the_plan_moves_nothing(dest: Path,
                                                                   damage: str) -> None:
    committed = _stage(dest)
    before = tree(dest)
    layout = JobLayout(str(dest), JOB_ID)
    victim = Path(layout.task_attempt_dir(committed["task_job_20260101_0001_m_000001"]),
                  "p=1", "c.csv")
    if damage == "missing":
        victim.unlink()
    else:
        victim.write_bytes(b"longer than the manifest says")
    with pytest.raises(UntrustedManifestError) as info:
        JobCommitter(str(dest), JOB_ID, config=fast_config()).commit(committed)
    assert str(victim) in str(info.value)
    assert ("is missing" if damage == "missing" else "its manifest says 7") in str(info.value)
    after = tree(dest)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # nothing moved; only the victim itself and the records of the listing differ
    assert all("/identities/" in k or k.endswith("identities/") or "c.csv" in k
               for k in changed), changed
    assert not Path(layout.journal).exists()  # nothing to resume or roll back



@pytest.mark.parametrize("renames", [1, 6])
def test_identities_in_several_files_and_calls_resume_and_roll_back_exactly(
        tmp_path: Path, dest: Path, monkeypatch: pytest.MonkeyPatch, renames: int) -> None:
    """Sources identified a few at a time while the manifests load, recorded a few per file:
    every record is found again."""
    from committer.job.durability import identities

    monkeypatch.setattr(identities, "BATCH_FILES", 2)
    monkeypatch.setattr(identities, "RECORD_FILES", 3)
    want = _expected(tmp_path)
    _interrupted(dest, renames, cleanup_skipped=True)
    layout = JobLayout(str(dest), JOB_ID)
    records = sorted(Path(layout.identities_dir).iterdir())
    assert len(records) >= 2
    assert sum(len(SourceIdentities.loads(r.read_bytes(), str(r)).paths) for r in records) == 7
    if renames == 1:
        resume(str(dest), JOB_ID, config=fast_config())
        assert _data(dest) == want
    else:
        report = rollback(str(dest), JOB_ID, config=fast_config())
        assert report.files_restored == renames and report.problems == []
        assert _data(dest) == {"p=1/": None, **EXISTING}


def test_records_of_the_earlier_format_are_read(dest: Path) -> None:
    """A commit interrupted by a version that recorded one file per task attempt (version 1)
    resumes exactly."""
    _interrupted(dest, 4, cleanup_skipped=True)
    layout = JobLayout(str(dest), JOB_ID)
    found: dict[str, dict[str, tuple[int, str]]] = {}
    for r in sorted(Path(layout.identities_dir).iterdir()):
        for path, (size, ident) in SourceIdentities.loads(r.read_bytes(), str(r)).files.items():
            attempt, _, rel = path.partition("/")
            found.setdefault(attempt, {})[rel] = (size, ident)
        r.unlink()
    for attempt, files in found.items():
        Path(layout.identities_dir, f"{attempt}.json").write_bytes(orjson.dumps({
            "version": 1, "jobId": JOB_ID, "taskAttemptID": attempt,
            "files": [[rel, size, ident] for rel, (size, ident) in files.items()]}))
    resume(str(dest), JOB_ID, config=fast_config())
    assert len([p for p in dest.rglob("*.csv") if "_temporary" not in p.parts]) == 7 + 2


def test_records_left_by_an_earlier_failed_commit_are_not_taken(dest: Path) -> None:
    """A record file no run of this commit wrote (an earlier attempt that stopped before its
    plan) is removed before identifying, not read by a later resume as this commit's."""
    committed = _stage(dest)
    layout = JobLayout(str(dest), JOB_ID)
    attempt = committed["task_job_20260101_0001_m_000000"]
    stale = Path(layout.identities_path(7))
    stale.parent.mkdir(parents=True)
    stale.write_bytes(orjson.dumps({"version": 2, "jobId": JOB_ID, "paths": [f"{attempt}/top.csv"],
                                    "sizes": [1], "identities": ["1-2-1"]}))
    cfg = fast_config()
    store = open_store(str(dest), cfg, backend=DiesAfterRenames(3))
    with pytest.raises(CommitFailedError):
        JobCommitter(str(dest), JOB_ID, config=cfg, store=store).commit(committed)
    assert not stale.exists()
    resume(str(dest), JOB_ID, config=fast_config())
    assert (dest / "top.csv").read_bytes() == b"t"


def test_a_store_without_stats_lists_each_task_attempt_directory_once(dest: Path) -> None:
    """Where identifying is not a stat per file (object stores: here local disk seen only
    through the plain Store interface) it is one walk (one paged listing) per task attempt
    directory whose manifest lacks identities, counted in the job's statistics."""
    committed = _stage(dest)
    walked: list[str] = []

    class Listing(FaultInjectingStore):
        def walk_files(self, root: str) -> Any:
            walked.append(root)
            return super().walk_files(root)

    cfg = fast_config()
    backend = Listing(LocalStore(), FaultPlan())
    assert not backend.identifies_by_stat
    summary = JobCommitter(str(dest), JOB_ID, config=cfg,
                           store=open_store(str(dest), cfg, backend=backend)).commit(committed)
    layout = JobLayout(str(dest), JOB_ID)
    assert sorted(walked) == sorted(layout.task_attempt_dir(a) for a in committed.values())
    counters = summary.iostatistics.counters
    assert counters[st.COMMITTER_SOURCES_IDENTIFIED] == 7
    assert counters[st.OP_LIST_STATUS] >= len(committed)
    assert summary.metrics["committer_files_committed"] == 7
    assert not (dest / "_temporary").exists()


def test_identified_sources_are_counted(dest: Path) -> None:
    committed = _stage(dest)
    summary = JobCommitter(str(dest), JOB_ID, config=fast_config()).commit(committed)
    counters = summary.iostatistics.counters
    assert counters[st.COMMITTER_SOURCES_IDENTIFIED] == 7
    assert counters[st.OP_GET_FILE_STATUS] >= 7
