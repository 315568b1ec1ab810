"""The directory fast path: a new partition that one task alone writes moves with one rename.

Local disk (it renames directories with ``renameat2(RENAME_NOREPLACE)``). Each test checks the
destination a reader sees and the statistics that say which path each directory took.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from committer import JobCommitter, task_ids
from committer import statistics as st
from committer.errors import (
    CommitFailedError,
    PathExistsError,
    PathNotFoundError,
    UntrustedManifestError,
)
from committer.job import resume, rollback
from committer.job.durability.journal import load_journal
from committer.job.stages import move_directories
from committer.layout import JobLayout
from committer.store import open_store
from committer.store.local import LocalStore
from manifest_schema.journal import State
from tests.committer.helpers import (
    JOB_ID,
    fast_config,
    new_job,
    strip_identities,
    task_attempt,
    tree,
    visible_files,
)


def _job(dest: Path, tasks: dict[int, dict[str, bytes]], etags: bool = True, **config: object
         ) -> tuple[JobCommitter, dict[str, str]]:
    """The committed tasks of a job; with ``etags`` false, their manifests give no file an
    identity (as Hadoop's task committer writes them), so job commit identifies the sources
    itself, and that stat is the directory's proof."""
    cfg = fast_config(**config)
    new_job(dest, config=cfg)
    committed = {}
    for t, files in tasks.items():
        ta = task_attempt(dest, t, 0, files, config=cfg)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    if not etags:
        strip_identities(JobLayout(str(dest), JOB_ID).manifests_dir)
    return JobCommitter(str(dest), JOB_ID, config=cfg), committed


@pytest.fixture(params=[True, False], ids=["etags", "no-etags"])
def etags(request: pytest.FixtureRequest) -> bool:
    """Manifests with identities, and without (the proof then rests on planning's stat)."""
    return bool(request.param)


def _all_files(tasks: dict[int, dict[str, bytes]]) -> dict[str, bytes]:
    return {rel: data for files in tasks.values() for rel, data in files.items()}


def _attempt_dir(dest: Path, task: int) -> Path:
    return Path(JobLayout(str(dest), JOB_ID).task_attempt_dir(task_ids(JOB_ID, task, 0)[1]))


OWN = {t: {f"p={t}/part-{t}-{k}.csv": f"{t}:{k}".encode() * (k + 1) for k in range(3)}
       for t in range(4)}


def test_one_new_partition_per_task_moves_each_whole(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags)
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 4
    assert c.get(st.OP_RENAME, 0) == 0
    assert c[st.COMMITTER_FILES_IN_MOVED_DIRECTORIES] == 12
    assert c.get(st.COMMITTER_DIRECTORY_MOVE_FALLBACKS, 0) == 0
    # the summary accounts for every file as per-file renames would
    assert summary.metrics[st.COMMITTER_FILES_COMMITTED] == 12
    assert summary.metrics[st.COMMITTER_BYTES_COMMITTED] == sum(map(len, _all_files(OWN).values()))
    assert sorted(f.rpartition("/dest/")[2] for f in summary.filenames) == sorted(_all_files(OWN))
    assert not (dest / "_temporary").exists()


def test_mixed_layout_moves_only_the_eligible_directories(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "old=1").mkdir(parents=True)
    (dest / "old=1" / "kept.csv").write_bytes(b"kept")
    tasks = {
        0: {"own=0/a.csv": b"a", "shared=1/a0.csv": b"s0", "root-0.csv": b"r",
            "old=1/new0.csv": b"n", "deep=0/x.csv": b"x", "deep=0/q=1/y.csv": b"y"},
        1: {"own=1/b.csv": b"b", "shared=1/b1.csv": b"s1"},
    }
    job, committed = _job(dest, tasks)
    summary = job.commit(committed)
    assert visible_files(dest) == {**_all_files(tasks), "old=1/kept.csv": b"kept"}
    c = summary.iostatistics.counters
    # own=0, own=1 and deep=0/q=1 (a leaf); not shared=1 (two writers), not old=1 (exists),
    # not deep=0 (a directory is planned below it), not the root
    assert c[st.OP_RENAME_DIRECTORY] == 3
    assert c[st.OP_RENAME] == 5
    assert c[st.COMMITTER_FILES_IN_MOVED_DIRECTORIES] == 3


def test_the_fast_path_can_be_turned_off(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, rename_directories=False)
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)
    assert summary.iostatistics.counters.get(st.OP_RENAME_DIRECTORY, 0) == 0
    assert summary.iostatistics.counters[st.OP_RENAME] == 12


def test_a_stray_file_in_the_task_directory_is_not_committed(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags)
    (_attempt_dir(dest, 1) / "p=1" / "stray.csv").write_bytes(b"not in the manifest")
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)  # no stray.csv
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 3
    assert c[st.COMMITTER_DIRECTORY_MOVE_FALLBACKS] == 1
    assert c[st.OP_RENAME] == 3


def test_a_file_of_another_size_than_the_manifest_says_falls_back(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN)
    victim = _attempt_dir(dest, 2) / "p=2" / "part-2-0.csv"
    victim.write_bytes(b"rewritten after task commit, longer")
    summary = job.commit(committed)
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 3
    assert c[st.COMMITTER_DIRECTORY_MOVE_FALLBACKS] == 1


def test_a_subdirectory_the_manifest_does_not_list_falls_back(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags)
    (_attempt_dir(dest, 0) / "p=0" / "empty").mkdir()
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)
    assert not (dest / "p=0" / "empty").exists()
    assert summary.iostatistics.counters[st.COMMITTER_DIRECTORY_MOVE_FALLBACKS] == 1


def test_a_file_committed_under_another_name_falls_back(tmp_path: Path) -> None:
    # A writer through the Python API may name a destination differently from its source:
    # then the task's directory is not the destination's mirror and cannot move whole.
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN)
    manifest = Path(JobLayout(str(dest), JOB_ID).manifest_path(task_ids(JOB_ID, 1, 0)[0]))
    doc = json.loads(manifest.read_bytes())
    doc["files"][0]["d"] = doc["files"][0]["d"].replace("part-1-0", "renamed-1-0")
    manifest.write_text(json.dumps(doc))
    summary = job.commit(committed)
    want = {k.replace("part-1-0", "renamed-1-0"): v for k, v in _all_files(OWN).items()}
    assert visible_files(dest) == want
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 3 and c[st.COMMITTER_DIRECTORY_MOVE_FALLBACKS] == 1


@pytest.mark.parametrize("in_c", [True, False], ids=["c", "python"])
def test_names_in_a_directory(monkeypatch: pytest.MonkeyPatch, in_c: bool) -> None:
    if not in_c:
        monkeypatch.setattr(move_directories, "_checks", None)
    elif importlib.util.find_spec("committer.job.stages._checks") is None:
        pytest.skip("the C checks were not built here")  # CI builds them: both run there
    names_in = move_directories._names_in
    assert names_in(["/d/p=1/a", "/d/p=1/b.csv"], "/d/p=1") == ["a", "b.csv"]
    assert names_in([], "/d/p=1") == []
    assert names_in(["/d/p=é/ü"], "/d/p=é") == ["ü"]
    for bad in (["/d/p=1/a", "/d/p=1/q/b"], ["/d/p=10/a"], ["/d/p=1/"], ["/d/p=1"],
                ["/d/p=1//a"], ["/e/p=1/a"], ["/d/p=2/a"], ["x"]):
        assert names_in(bad, "/d/p=1") is None, bad


def _with_checksum_files(dest: Path, tasks: dict[int, dict[str, bytes]]) -> None:
    """Hadoop's local filesystem leaves ``.<name>.crc`` beside each file a Spark task writes."""
    for t, files in tasks.items():
        for rel in files:
            d, _, name = rel.rpartition("/")
            (_attempt_dir(dest, t) / d / f".{name}.crc").write_bytes(b"crc of " + name.encode())


def test_checksum_side_files_move_with_their_directory(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags)
    _with_checksum_files(dest, OWN)
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 4 and c.get(st.COMMITTER_DIRECTORY_MOVE_FALLBACKS, 0) == 0
    assert summary.metrics[st.COMMITTER_FILES_COMMITTED] == 12  # side files are not output
    assert sorted(os.listdir(dest / "p=1")) == sorted(
        [n for rel in OWN[1] for n in (rel[4:], f".{rel[4:]}.crc")])


def test_a_checksum_file_of_no_listed_file_falls_back(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags)
    _with_checksum_files(dest, OWN)
    (_attempt_dir(dest, 3) / "p=3" / ".unlisted.csv.crc").write_bytes(b"stray")
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 3 and c[st.COMMITTER_DIRECTORY_MOVE_FALLBACKS] == 1
    assert sorted(os.listdir(dest / "p=3")) == sorted(rel[4:] for rel in OWN[3])


class _Racing(LocalStore):
    """Does something just before each directory rename: creates the destination, or drops a
    late file into the source (after the commit's check of the source)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def rename_dir(self, src: str, dst: str) -> None:
        if self.what == "destination" and "/_temporary/" not in dst:
            os.makedirs(dst)
        elif self.what == "late-file" and "/_temporary/" not in dst:
            Path(src, "late.csv").write_bytes(b"late writer")
        super().rename_dir(src, dst)


def _commit_with(dest: Path, backend: LocalStore, tasks: dict[int, dict[str, bytes]],
                 etags: bool = True) -> JobCommitter:
    cfg = fast_config()
    job, committed = _job(dest, tasks, etags)
    job = JobCommitter(str(dest), JOB_ID, config=cfg,
                       store=open_store(str(dest), cfg, backend=backend))
    job.commit(committed)
    return job


def test_a_destination_that_appears_before_the_move_is_not_replaced(
        tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job = _commit_with(dest, _Racing("destination"), OWN, etags)
    assert visible_files(dest) == _all_files(OWN)
    c = job.store.stats.snapshot().counters
    assert c.get(st.OP_RENAME_DIRECTORY, 0) == 0 and c["op_rename_directory.failures"] == 4
    assert c[st.COMMITTER_DIRECTORY_MOVE_FALLBACKS] == 4
    assert c[st.OP_RENAME] == 12 + 1  # and _SUCCESS's write-then-rename


def test_a_file_arriving_during_the_move_goes_back_not_into_the_table(
        tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    job = _commit_with(dest, _Racing("late-file"), OWN, etags)
    assert visible_files(dest) == _all_files(OWN)
    assert job.store.stats.snapshot().counters[st.OP_RENAME_DIRECTORY] == 4


class _Vanishing(LocalStore):
    """Deletes one file of the directory just before the directory moves (after its proof)."""

    def rename_dir(self, src: str, dst: str) -> None:
        if "/_temporary/" not in dst and dst.endswith("/p=2"):
            Path(src, "part-2-1.csv").unlink()
        super().rename_dir(src, dst)


def test_a_file_vanishing_after_the_proof_fails_the_commit_naming_it(
        tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(CommitFailedError, match=r"part-2-1\.csv vanished"):
        _commit_with(dest, _Vanishing(), OWN, etags)
    # rolled back (as Spark's abortJob does): the rollback names the file it cannot restore;
    # nothing of the job stays visible, and every file that was not deleted is back in its
    # task's directory
    with pytest.raises(CommitFailedError, match=r"part-2-1\.csv: neither it nor its source"):
        rollback(str(dest), JOB_ID, config=fast_config(), cleanup=False)
    assert visible_files(dest) == {}
    for t, files in OWN.items():
        names = {rel.rpartition("/")[2] for rel in files} - ({"part-2-1.csv"} if t == 2 else set())
        assert set(os.listdir(_attempt_dir(dest, t) / f"p={t}")) == names


def test_local_directory_rename_never_replaces(tmp_path: Path) -> None:
    store = LocalStore()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"f")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PathExistsError):
        store.rename_dir(str(tmp_path / "a"), str(tmp_path / "empty"))
    with pytest.raises(PathNotFoundError):
        store.rename_dir(str(tmp_path / "missing"), str(tmp_path / "b"))
    with pytest.raises(PathNotFoundError):
        store.rename_dir(str(tmp_path / "a"), str(tmp_path / "no" / "parent"))
    store.rename_dir(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b" / "f").read_bytes() == b"f" and not (tmp_path / "a").exists()


class _FailAfterMoves(LocalStore):
    """Fails the commit at its first per-file rename into the destination, after the
    directories have moved whole (one worker: the chunks run in order)."""

    def rename_file(self, src: str, dst: str) -> None:
        if "/_temporary/" not in dst and "/_temporary/" in src:
            raise PathExistsError(f"injected conflict: {dst}", dst)
        super().rename_file(src, dst)

    def rename_batch(self, entries, start=0):  # type: ignore[no-untyped-def]
        return super(LocalStore, self).rename_batch(entries, start)


MIXED = {**OWN, 9: {"shared/z.csv": b"z"}, 8: {"shared/w.csv": b"w"}}


def _failed_commit(dest: Path, etags: bool = True) -> JobCommitter:
    cfg = fast_config(io_threads=1, abort_rollback=False)
    job, committed = _job(dest, MIXED, etags, io_threads=1)
    job = JobCommitter(str(dest), JOB_ID, config=cfg,
                       store=open_store(str(dest), cfg, backend=_FailAfterMoves()))
    with pytest.raises(CommitFailedError):
        job.commit(committed)
    return job


def test_rollback_moves_directories_back_whole(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.csv").write_bytes(b"keep")
    job = _failed_commit(dest, etags)
    journal = load_journal(job.store, job.layout)
    assert journal is not None and journal.state == State.RENAMING
    assert sorted(m.dest.rpartition("/")[2] for m in journal.directory_moves) == \
        ["p=0", "p=1", "p=2", "p=3"]
    assert (dest / "p=0" / "part-0-0.csv").exists()  # moved whole before the failure
    report = rollback(str(dest), JOB_ID, config=fast_config(), cleanup=False)
    assert report.files_restored == 12
    assert visible_files(dest) == {"keep.csv": b"keep"}
    for t, files in OWN.items():
        assert sorted(os.listdir(_attempt_dir(dest, t) / f"p={t}")) == \
            sorted(rel.rpartition("/")[2] for rel in files)
    assert not any(rel.startswith("p=") for rel in tree(dest))


def test_rollback_moves_checksum_side_files_back_with_their_directory(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    cfg = fast_config(io_threads=1, abort_rollback=False)
    job, committed = _job(dest, MIXED, io_threads=1)
    _with_checksum_files(dest, OWN)
    job = JobCommitter(str(dest), JOB_ID, config=cfg,
                       store=open_store(str(dest), cfg, backend=_FailAfterMoves()))
    with pytest.raises(CommitFailedError):
        job.commit(committed)
    assert (dest / "p=0" / ".part-0-0.csv.crc").exists()  # moved whole, side files too
    report = rollback(str(dest), JOB_ID, config=fast_config(), cleanup=False)
    assert report.files_restored == 12
    assert not any(rel.startswith("p=") for rel in tree(dest))
    assert sorted(os.listdir(_attempt_dir(dest, 0) / "p=0")) == sorted(
        [n for rel in OWN[0] for n in (rel[4:], f".{rel[4:]}.crc")])


def test_resume_after_directory_moves_completes_the_commit(tmp_path: Path, etags: bool) -> None:
    dest = tmp_path / "dest"
    _failed_commit(dest, etags)
    resume(str(dest), JOB_ID, config=fast_config())
    assert visible_files(dest) == _all_files(MIXED)
    assert not (dest / "_temporary").exists()


def test_dynamic_overwrite_moves_a_replaced_partition_whole(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "p=1").mkdir(parents=True)
    (dest / "p=1" / "old.csv").write_bytes(b"old")
    (dest / "p=9").mkdir()
    (dest / "p=9" / "untouched.csv").write_bytes(b"untouched")
    cfg = fast_config()
    new_job(dest, config=cfg)
    committed = {}
    for t, files in OWN.items():
        ta = task_attempt(dest, t, 0, files, config=cfg)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    job = JobCommitter(str(dest), JOB_ID, config=cfg, dynamic_partition_overwrite=True)
    summary = job.commit(committed)
    assert visible_files(dest) == {**_all_files(OWN), "p=9/untouched.csv": b"untouched"}
    assert summary.iostatistics.counters[st.OP_RENAME_DIRECTORY] == 4


def test_each_file_is_stat_ed_once(tmp_path: Path, etags: bool,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With identities in the manifests the move's proof stats each file; without, the stat
    that identified each source while planning is the proof's, and the move only reads the
    directory's names."""
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags)
    _with_checksum_files(dest, OWN)
    proofs: list[str] = []
    for method in ("directory_holds", "directory_holds_names"):
        def spy(self: LocalStore, path: str, *args: object, _name: str = method,
                _real: object = getattr(LocalStore, method)) -> object:
            proofs.append(_name)
            return _real(self, path, *args)  # type: ignore[operator]

        monkeypatch.setattr(LocalStore, method, spy)
    summary = job.commit(committed)
    assert visible_files(dest) == _all_files(OWN)
    c = summary.iostatistics.counters
    assert c[st.OP_RENAME_DIRECTORY] == 4 and c.get(st.COMMITTER_DIRECTORY_MOVE_FALLBACKS, 0) == 0
    if etags:
        assert proofs == ["directory_holds"] * 4
        assert c.get(st.COMMITTER_SOURCES_IDENTIFIED, 0) == 0
    else:
        assert proofs == ["directory_holds_names"] * 4
        assert c[st.COMMITTER_SOURCES_IDENTIFIED] == 12
        assert c[st.OP_GET_FILE_STATUS] >= 12


def test_without_etags_a_source_of_another_size_stops_the_commit_before_anything_moves(
        tmp_path: Path) -> None:
    """Where the manifests give no identities the sources are all stat'ed while planning, and
    one of another size than its manifest says is refused then (with identities the directory
    falls back to per-file renames instead)."""
    dest = tmp_path / "dest"
    job, committed = _job(dest, OWN, etags=False)
    victim = _attempt_dir(dest, 2) / "p=2" / "part-2-0.csv"
    victim.write_bytes(b"rewritten after task commit, longer")
    with pytest.raises(UntrustedManifestError, match=r"part-2-0\.csv is 35 bytes"):
        job.commit(committed)
    assert visible_files(dest) == {}
