"""The GCS backend on a bucket with a hierarchical namespace (the simulated account,
``committer/testing/cloud_sim/gcs_folders.py``): folders as directories, a directory moved
whole by one folder rename, and the directory fast path's commit, rollback and resume there.

The service's behaviour these rely on is pinned in ``tests/testing/cloud_sim/
test_gcs_folders.py`` (each test naming the Google documentation it models)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from committer import statistics as st
from committer.errors import CommitFailedError, PathExistsError, PathNotFoundError
from committer.job import JobCommitter, resume, rollback
from committer.job.durability.journal import load_journal
from committer.store import ManagedStore, open_store
from committer.store.gcs import GcsStore
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.cloud_sim import CloudSim, SimOptions
from manifest_schema.journal import State
from tests.committer.helpers import fast_config


@pytest.fixture(scope="module")
def _sim() -> Iterator[CloudSim]:
    sim = CloudSim(SimOptions(service="gcs", latency_ms=2, p99_ms=20, gcs_hns=True,
                              gcs_move=True, seed=4)).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def sim(_sim: CloudSim) -> CloudSim:
    _sim.reset()
    return _sim


def _store(sim: CloudSim, dest: str, **config: Any) -> ManagedStore:
    return open_store(dest, fast_config(storage_options=sim.trusted_options, **config))


def _ops(sim: CloudSim) -> dict[str, int]:
    by_op: dict[str, int] = sim.stats()["by_op"]
    return by_op


def test_the_store_asks_the_bucket_once_whether_it_has_folders(sim: CloudSim) -> None:
    sim.populate([{"bucket": "hb", "key": "x", "size": 1}])
    store = _store(sim, "gs://hb/t")
    backend = store.backend
    assert isinstance(backend, GcsStore)
    assert backend.namespace_source == "unknown"
    assert store.renames_directories and backend.namespace_source == "bucket"
    assert store.renames_directories and _ops(sim).get("get_storage_layout") == 1
    told = _store(sim, "gs://hb/t", ).backend
    assert isinstance(told, GcsStore)
    told_options = {**sim.trusted_options, "committer_hierarchical": "false"}
    flat = open_store("gs://hb/t", fast_config(storage_options=told_options))
    assert not flat.renames_directories
    assert isinstance(flat.backend, GcsStore) and flat.backend.namespace_source == "option"


def test_directories_are_folders(sim: CloudSim) -> None:
    """mkdirs makes a folder (and its parents), an empty one is a directory to stat and to
    list, a tree's delete takes its folders too, and "remove if empty" refuses a folder that
    holds anything."""
    sim.populate([{"bucket": "hb", "key": "seed", "size": 1}])
    store = _store(sim, "gs://hb/t")
    store.mkdirs("gs://hb/t/a/b")
    assert store.stat("gs://hb/t/a/b").is_dir and store.stat("gs://hb/t/a").is_dir
    assert [f.path for f in store.list_dir("gs://hb/t/a")] == ["gs://hb/t/a/b"]
    assert store.list_dir("gs://hb/t/a/b") == []
    # the partial listing of a directory's checks sees the empty folder too
    assert store.backend.child_sizes("gs://hb/t/a") == {"b": None}
    assert store.count_children("gs://hb/t/a/b") == 0
    store.write_bytes("gs://hb/t/a/b/f", b"data")
    assert not store.remove_dir_if_empty("gs://hb/t/a/b")
    with pytest.raises(PathExistsError):
        store.mkdirs("gs://hb/t/a/b/f")  # a file where a directory must be
    store.delete_file("gs://hb/t/a/b/f")
    assert store.remove_dir_if_empty("gs://hb/t/a/b")
    with pytest.raises(PathNotFoundError):
        store.stat("gs://hb/t/a/b")
    store.write_bytes("gs://hb/t/a/c/d/g", b"g")
    assert store.delete_tree("gs://hb/t")
    assert [o["key"] for o in sim.objects("hb", "t")] == []  # no object, no folder left
    assert _ops(sim).get("delete_folder_recursive") == 1


def test_a_directory_renames_whole_in_one_request_and_never_replaces(sim: CloudSim) -> None:
    for key in ("t/src/1", "t/src/2", "t/src/sub/3", "t/other/x"):
        sim.populate([{"bucket": "hb", "key": key, "size": 3}])
    store = _store(sim, "gs://hb/t")
    before = {o["key"]: o["md5"] for o in sim.objects("hb", "t/src/") if not o["is_dir"]}
    sim.reset_stats()
    # the destination's parent folder is missing: made, and the rename sent once more
    store.rename_dir("gs://hb/t/src", "gs://hb/t/new/dst")
    ops = _ops(sim)
    assert ops["rename_folder"] == 2 and "move" not in ops and "rewrite" not in ops
    after = {o["key"]: o["md5"] for o in sim.objects("hb", "t/new/dst/") if not o["is_dir"]}
    assert after == {k.replace("t/src/", "t/new/dst/"): v for k, v in before.items()}
    assert not store.exists("gs://hb/t/src")
    with pytest.raises(PathExistsError):
        store.rename_dir("gs://hb/t/other", "gs://hb/t/new/dst")
    with pytest.raises(PathNotFoundError):
        store.rename_dir("gs://hb/t/src", "gs://hb/t/elsewhere")
    assert store.exists("gs://hb/t/other/x")


OWN = {t: {f"p={t}/part-{t}-{k}.csv": f"{t}:{k}".encode() * (k + 1) for k in range(3)}
       for t in range(4)}
SHARED = {8: {"shared/w.csv": b"w"}, 9: {"shared/z.csv": b"z"}}


def _job(sim: CloudSim, dest: str, tasks: dict[int, dict[str, bytes]],
         **config: Any) -> tuple[JobCommitter, dict[str, str], ManagedStore]:
    store = _store(sim, dest, **config)
    job_id = f"j{uuid.uuid4().hex[:10]}"
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    job.setup()
    committed = {}
    for t, files in tasks.items():
        task_id, attempt = task_ids(job_id, t, 0)
        ta = TaskAttemptCommitter(dest, job_id, task_id, attempt, config=store.config,
                                  store=store)
        ta.setup()
        for rel, data in files.items():
            with ta.open_output(rel) as out:
                out.write(data)
        ta.commit()
        committed[task_id] = attempt
    return JobCommitter(dest, job_id, config=store.config, store=store), committed, store


def _table(sim: CloudSim, prefix: str = "t/") -> dict[str, Any]:
    """Every object (its size) and folder below ``prefix`` but the committer's own."""
    out: dict[str, Any] = {}
    for o in sim.objects("hb", prefix):
        rel = o["key"][len(prefix):]
        if not rel or rel.startswith(("_temporary", "_manifest_committer")):
            continue
        out[rel.rstrip("/") + "/" if o["is_dir"] else rel] = "dir" if o["is_dir"] else o["size"]
    return out


def test_each_task_s_new_partition_moves_by_one_folder_rename(sim: CloudSim) -> None:
    sim.populate([{"bucket": "hb", "key": "t/keep.csv", "size": 4}])
    job, committed, _ = _job(sim, "gs://hb/t", {**OWN, **SHARED})
    sim.reset_stats()
    summary = job.commit(committed)
    ops = _ops(sim)
    assert ops["rename_folder"] == 4  # one per task-owned directory
    assert ops["move"] == 2  # the shared directory, file by file
    # the task folders the renames emptied, deleted as they go, under the default rate cap
    # (four tasks' folders after their directory moved; two tasks' folders and their
    # "shared" folders after their files), then _temporary's at the end
    assert ops["delete_folder"] == 4 + 2 * 2 + 1
    assert ops["delete_folder_recursive"] == 1  # the job directory, manifests and all
    assert summary.iostatistics.counters[st.OP_RENAME_DIRECTORY] == 4
    assert summary.iostatistics.counters[st.COMMITTER_FILES_IN_MOVED_DIRECTORIES] == 12
    want = {rel: len(data) for files in {**OWN, **SHARED}.values()
            for rel, data in files.items()}
    got = _table(sim)
    assert {k: v for k, v in got.items() if v != "dir" and k != "_SUCCESS"} == {
        **want, "keep.csv": 4}
    assert not sim.objects("hb", "t/_temporary")  # nothing left: no object, no folder


def test_the_fast_path_off_renames_file_by_file(sim: CloudSim) -> None:
    job, committed, _ = _job(sim, "gs://hb/t", OWN, rename_directories=False)
    sim.reset_stats()
    job.commit(committed)
    ops = _ops(sim)
    assert "rename_folder" not in ops and ops["move"] == 12


def _failed_commit(sim: CloudSim) -> tuple[JobCommitter, dict[str, str]]:
    """A commit that fails at its first file-by-file rename (the shared directory), after the
    task-owned directories moved whole; abort does not roll it back."""
    sim.populate([{"bucket": "hb", "key": "t/keep.csv", "size": 4}])
    job, committed, _ = _job(sim, "gs://hb/t", {**OWN, **SHARED}, io_threads=1,
                             abort_rollback=False)
    sim.set_faults(fail=[{"op": "move", "times": 1, "status": 403, "code": "forbidden"}])
    with pytest.raises(CommitFailedError):
        job.commit(committed)
    sim.set_faults(clear=True)
    journal = load_journal(job.store, job.layout)
    assert journal is not None and journal.state == State.RENAMING
    assert len(journal.directory_moves) == 4
    assert {f"p={t}/" for t in OWN} <= set(_table(sim))  # moved whole before the failure
    return job, committed


def test_rollback_moves_each_directory_back_in_one_folder_rename(sim: CloudSim) -> None:
    sim.populate([{"bucket": "hb", "key": "t/keep.csv", "size": 4}])
    before = _table(sim)
    job, _ = _failed_commit(sim)
    # the shared directory's other file may have moved before the one refused
    shared = sum(1 for k in _table(sim) if k.startswith("shared/") and not k.endswith("/"))
    sim.reset_stats()
    report = rollback(job.layout.dest, job.layout.job_id,
                      config=fast_config(storage_options=sim.trusted_options))
    assert report.files_restored == 12 + shared
    assert _ops(sim)["rename_folder"] == 4
    assert _table(sim) == before  # the table as it was: no new folder left either
    assert not sim.objects("hb", "t/_temporary")


def test_resume_after_the_folder_renames_completes_the_commit(sim: CloudSim) -> None:
    job, _ = _failed_commit(sim)
    resume(job.layout.dest, job.layout.job_id,
           config=fast_config(storage_options=sim.trusted_options))
    want = {rel: len(data) for files in {**OWN, **SHARED}.values()
            for rel, data in files.items()}
    got = _table(sim)
    assert {k: v for k, v in got.items() if v != "dir" and k != "_SUCCESS"} == {
        **want, "keep.csv": 4}
    assert not sim.objects("hb", "t/_temporary")


def test_a_tree_without_the_recursive_delete_goes_object_by_object(sim: CloudSim) -> None:
    """An endpoint without ``folders.deleteRecursive`` (501): the tree's objects, then its
    folders deepest first; and a directory marker object of the flat layout (``d/``) does not
    keep its folder from being removed when empty."""
    for key in ("t/a/1", "t/a/b/2", "t/c/3"):
        sim.populate([{"bucket": "hb", "key": key, "size": 1}])
    store = _store(sim, "gs://hb/t")
    sim.set_faults(fail=[{"op": "delete_folder_recursive", "times": 1, "status": 501,
                          "code": "notImplemented"}])
    assert store.delete_tree("gs://hb/t")
    assert sim.objects("hb", "t") == []
    assert _ops(sim)["delete_folder"] >= 4  # t/a/b/, t/a/, t/c/, t/
    sim.populate([{"bucket": "hb", "key": "m/d/", "size": 0}])  # the flat layout's marker
    assert store.remove_dir_if_empty("gs://hb/m/d")
    assert not store.exists("gs://hb/m/d") and sim.objects("hb", "m/d") == []
