"""Interrupted job commits through the console script: ``status`` shows them, ``cleanup`` never
removes them, ``resume`` / ``rollback`` / ``abort-job`` finish or undo them.

The interrupted commit is real: a child process runs a dynamic partition overwrite job commit and
kills itself with SIGKILL just before its third file rename into the destination, after the
replaced partitions were moved aside into the job directory.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from pathlib import Path

import orjson

from committer import JobCommitter, task_ids
from committer.layout import JobLayout
from committer.store import open_store
from committer.store.local import LocalStore
from tests.cli.conftest import check_golden, run, tree_state
from tests.cli.jobs import standard_tasks, write_job
from tests.committer.helpers import fast_config, visible_files

JOB = "job_crash"
INTERRUPTED_NOTE = "interrupted — run `manifest-committer resume` or `rollback`"
# What was in the destination before the job: two of its partitions are overwritten by the job.
EXISTING = {
    "year=2024/old-0.csv": b"old 2024",
    "year=2025/old-1.csv": b"old 2025",
    "other=1/keep.csv": b"not overwritten",
}
RENAMES_BEFORE_KILL = 2


class _DiesMidRename(LocalStore):
    """Local disk that SIGKILLs its process before the (n+1)th file rename into the destination
    (renames into the job directory, i.e. moving partitions aside, are let through)."""

    def __init__(self, renames: int) -> None:
        super().__init__()
        self.left = renames
        self.guard = threading.Lock()

    def rename_file(self, src: str, dst: str) -> None:
        if "/_temporary/" not in dst:
            # the rename itself happens under the lock too, so exactly ``renames`` renames
            # have completed when the kill comes, whichever worker threads did them
            with self.guard:
                if self.left == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                self.left -= 1
                super().rename_file(src, dst)
            return
        super().rename_file(src, dst)


def _commit_and_die(dest: str) -> None:
    # One rename worker: a worker prunes the task directories its chunk emptied, so with several
    # a one-file task may or may not lose its directory before the kill. With one, chunks run
    # in turn and exactly one task's directory (the first chunk's) is gone when the kill comes.
    config = fast_config(io_threads=1)
    store = open_store(dest, config, backend=_DiesMidRename(RENAMES_BEFORE_KILL))
    committer = JobCommitter(dest, JOB, config=config, store=store,
                             dynamic_partition_overwrite=True)
    committer.commit(dict(task_ids(JOB, n) for n in range(len(standard_tasks()))))


def _interrupted_commit(tmp: Path) -> tuple[JobLayout, dict[str, bytes]]:
    """A destination with old data and a job whose commit was killed mid-rename; returns the
    job and the destination's visible files before the job."""
    dest = tmp / "dest"
    for rel, data in EXISTING.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    before = visible_files(dest)
    layout = write_job(dest, JOB, standard_tasks())
    # From a fork server, not a fork of this process: a fork copies a lock that one of this
    # process's threads (left by an earlier test) happened to hold, held for ever.
    child = multiprocessing.get_context("forkserver").Process(target=_commit_and_die,
                                                              args=(str(dest),))
    child.start()
    child.join(600)
    assert child.exitcode == -signal.SIGKILL, "the commit was meant to die mid-rename"
    journal = orjson.loads((Path(layout.attempt_dir) / "_journal.json").read_bytes())
    assert journal["state"] == "renaming"
    assert (Path(layout.attempt_dir) / "replaced" / "d" / "year=2024" / "old-0.csv").exists()
    return layout, before


def _expected_after_commit() -> dict[str, bytes]:
    out = {"other=1/keep.csv": EXISTING["other=1/keep.csv"]}
    for files in standard_tasks():
        out.update(files)
    return out


def test_cleanup_keeps_an_interrupted_commit_and_resume_completes_it(tmp: Path) -> None:
    layout, _before = _interrupted_commit(tmp)
    dest = layout.dest
    # "--older-than 0s": every uncommitted job is old enough to be removed, were it not for
    # the interrupted commit. (Not aging the files: that changes the manifests' local etags.)

    status = run("status", dest, "--json")
    assert status.code == 0, status.err
    (job,) = status.json()["jobs"]
    assert (job["state"], job["note"]) == ("interrupted", INTERRUPTED_NOTE)
    (commit,) = job["interrupted_commits"]
    # moved_aside: the three partitions the job writes (two of them existed before)
    assert (commit["attempt"], commit["state"], commit["mode"], commit["files"],
            commit["moved_aside"]) == (0, "renaming", "dynamic-overwrite", 5, 3)
    assert commit["resume_would"] == ("rename the rest of 5 file(s) (1 director(ies) may move "
                                      "whole), write _SUCCESS, clean up")
    assert commit["rollback_would"].startswith("move up to 5 renamed file(s) back")
    check_golden("status-interrupted", status.json(), tmp)
    human = run("status", dest)
    assert human.code == 0 and "Interrupted commits" in human.out and "renaming" in human.out
    assert "rename the rest of 5 file(s)" in human.out

    before = tree_state(tmp)
    for extra in ([], ["--include-committed"]):
        dry = run("cleanup", dest, "--older-than", "0s", "--dry-run", *extra)
        assert dry.code == 0, dry.err
        assert not any(line.startswith("would remove") for line in dry.out.splitlines())
        assert f"kept {layout.job_dir} ({INTERRUPTED_NOTE}: attempt 00 renaming;" in dry.out
        real = run("cleanup", dest, "--older-than", "0s", *extra)
        assert real.code == 0, real.err
        assert not any(line.startswith("removed") for line in real.out.splitlines())
        assert f"kept {layout.job_dir} ({INTERRUPTED_NOTE}" in real.out
        assert tree_state(tmp) == before, "cleanup changed an interrupted commit"
    as_json = run("cleanup", dest, "--older-than", "0s", "--include-committed", "--json")
    assert as_json.code == 0 and as_json.json()["removed"] == []
    check_golden("cleanup-interrupted", as_json.json(), tmp)
    assert tree_state(tmp) == before

    resumed = run("resume", dest)
    assert resumed.code == 0, resumed.err
    assert resumed.out == (f"resumed job {JOB} from state renaming (rename the rest of 5 "
                           "file(s) (1 director(ies) may move whole), write _SUCCESS, clean "
                           "up): committed, 5 file(s)\n")
    assert visible_files(Path(dest)) == _expected_after_commit()
    assert orjson.loads((Path(dest) / "_SUCCESS").read_bytes())["jobId"] == JOB
    assert not Path(layout.job_dir).exists()
    history = run("history", dest, "--json")
    assert history.code == 0
    assert [(c["job_id"], c["mode"], c["files"]) for c in history.json()["commits"]] == [
        (JOB, "dynamic-overwrite", 5)]
    after = run("status", dest, "--json").json()
    assert after["jobs"] == [] and after["last_committed"]["job_id"] == JOB


def test_rollback_restores_the_destination(tmp: Path) -> None:
    layout, before = _interrupted_commit(tmp)
    rolled = run("rollback", layout.dest, "--job-id", JOB)
    assert rolled.code == 0, rolled.err
    # the new partition "p=a b%3Ac", which task 2 alone writes, moved whole before any file
    # rename (directories move first): its one file goes back too
    assert rolled.out.startswith(f"rolled back job {JOB} from state renaming: "
                                 f"{RENAMES_BEFORE_KILL + 1} file(s) moved back")
    assert visible_files(Path(layout.dest)) == before
    assert not Path(layout.job_dir).exists()
    assert run("history", layout.dest, "--json").json()["commits"] == []
    nothing = run("resume", layout.dest)
    assert nothing.code == 2 and "no interrupted commit" in nothing.err


def test_abort_job_rolls_back_a_started_commit(tmp: Path) -> None:
    layout, before = _interrupted_commit(tmp)
    aborted = run("abort-job", layout.dest, "--job-id", JOB, "--json")
    assert aborted.code == 0, aborted.err
    assert aborted.json()["removed"] is True
    # the renamed files went back with the job directory; the overwritten partitions are back
    assert visible_files(Path(layout.dest)) == before
    assert not Path(layout.temporary_dir).exists()


def test_abort_job_help_says_it_rolls_back() -> None:
    r = run("abort-job", "--help")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "rolls back a commit" in text and "moved aside" in text and "restored" in text
