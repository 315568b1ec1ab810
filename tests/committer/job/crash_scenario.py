"""A small job commit scenario, the store wrappers the crash and concurrency tests put under it,
and the subprocess entry point that commits it and dies by SIGKILL after a chosen store call.

    python -m tests.committer.job.crash_scenario ROOT MODE          # commit; print the op count
    MANIFEST_COMMITTER_CRASH_AFTER_OPS=N python -m ...              # SIGKILL after N store calls

The crash test starts the children from a ``multiprocessing`` fork server instead (the same
code, ``child_main``, without paying for a Python start per kill).

The kill switch lives only here, in a store wrapper the test harness installs in the child
process: no production code path reads the environment variable.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson

from committer import CommitterConfig, JobCommitter
from committer.store import ManagedStore
from committer.store.base import FileStatus, SourceEntry, Store
from committer.store.local import LocalStore
from tests.committer.helpers import fast_config, new_job, task_attempt, tree

T = TypeVar("T")
CRASH_ENV = "MANIFEST_COMMITTER_CRASH_AFTER_OPS"
JOB_ID = "job_crash_0001"
MODES = ("append", "static", "dynamic")

EXISTING: dict[str, bytes] = {
    "p=1/old-1.csv": b"old one",
    "p=2/old-2.csv": b"old two",
    "p=4/sub/old-4.csv": b"old four",
    "top.csv": b"top level",
}
EXISTING_EMPTY_DIRS = ("p=4/empty",)
PREVIOUS_SUCCESS = orjson.dumps({"jobId": "job_previous", "success": True})
TASKS: dict[int, dict[str, bytes]] = {
    0: {"p=1/new-0a.csv": b"a" * 10, "p=3/new-0b.csv": b"b" * 11, "root-0.csv": b"r0"},
    1: {"p=1/new-1a.csv": b"c" * 12, "p=4/sub/new-1b.csv": b"d" * 13,
        "p=5/q=1/new-1c.csv": b"e" * 14},
    2: {"p=3/new-2a.csv": b"f" * 15, "p=5/q=2/new-2b.csv": b"g" * 16, "root-2.csv": b"r2"},
}


class CountingStore(Store):
    """Delegates every call to ``inner``, calling ``before_op`` first (thread-safe count)."""

    def __init__(self, inner: Store, before_op: Callable[[int], None] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.supports_etags = inner.supports_etags
        self.rename_keeps_etag = inner.rename_keeps_etag
        self.renames_directories = inner.renames_directories
        self.identifies_by_stat = inner.identifies_by_stat
        self.ops = 0
        self._lock = threading.Lock()
        self._before = before_op

    def _op(self, fn: Callable[[], T]) -> T:
        with self._lock:
            self.ops += 1
            n = self.ops
        if self._before is not None:
            self._before(n)
        return fn()

    def stat(self, path: str) -> FileStatus:
        return self._op(lambda: self.inner.stat(path))

    def list_dir(self, path: str) -> list[FileStatus]:
        return self._op(lambda: self.inner.list_dir(path))

    def list_names(self, path: str) -> list[str]:
        return self._op(lambda: self.inner.list_names(path))

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        return self._op(lambda: iter(list(self.inner.walk_files(root))))

    def mkdirs(self, path: str) -> None:
        self._op(lambda: self.inner.mkdirs(path))

    def rename_file(self, src: str, dst: str) -> None:
        self._op(lambda: self.inner.rename_file(src, dst))

    def rename_dir(self, src: str, dst: str) -> None:
        self._op(lambda: self.inner.rename_dir(src, dst))

    def replace_file(self, src: str, dst: str) -> None:
        self._op(lambda: self.inner.replace_file(src, dst))

    def delete_file(self, path: str) -> bool:
        return self._op(lambda: self.inner.delete_file(path))

    def delete_tree(self, path: str) -> bool:
        return self._op(lambda: self.inner.delete_tree(path))

    def remove_dir_if_empty(self, path: str) -> bool:
        return self._op(lambda: self.inner.remove_dir_if_empty(path))

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        return self._op(lambda: self.inner.read_bytes(path, limit))

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        self._op(lambda: self.inner.write_bytes(path, data, exclusive=exclusive))

    def identify_sources(self, root: str, entries: Sequence[SourceEntry]
                         ) -> tuple[list[SourceEntry], list[tuple[int, int | None]]]:
        return self._op(lambda: self.inner.identify_sources(root, entries))

    def identity(self, status: FileStatus) -> str | None:
        return self.inner.identity(status)

    def proves_rename(self, found: FileStatus, size: int | None, expected: str | None) -> bool:
        return self.inner.proves_rename(found, size, expected)


class CountingLocalStore(CountingStore, LocalStore):
    """A counting local store that is a ``LocalStore`` too, so the engine keeps its
    local-disk-only paths (pruning emptied task directories during the renames) and the kills
    land among those calls as well."""

    def __init__(self, before_op: Callable[[int], None] | None = None) -> None:
        self.local = LocalStore()
        super().__init__(self.local, before_op)

    # the local store's batch loops call the OS directly; here every call is counted
    rename_batch = Store.rename_batch

    def rmdir_run(self, paths: Sequence[str]) -> int:
        removed = 0
        for path in paths:
            removed += self._op(partial(self.local.rmdir_run, [path]))
        return removed


def crash_after(n: int) -> Callable[[int], None]:
    def before(op: int) -> None:
        if op > n:
            os.kill(os.getpid(), signal.SIGKILL)

    return before


def slow(seconds: float) -> Callable[[int], None]:
    """Widen every store call, so concurrent commits really overlap."""
    return lambda _op: time.sleep(seconds)


# -- the scenario --------------------------------------------------------------------------


def dest_of(root: Path) -> Path:
    return root / "dest"


def committed_tasks() -> dict[str, str]:
    from committer import task_ids

    return dict(task_ids(JOB_ID, t, 0) for t in TASKS)


def build(root: Path, mode: str, config: CommitterConfig | None = None) -> dict[str, Any]:
    """Existing data, then the job up to (not including) job commit; returns the snapshot of the
    destination before the job. In static overwrite the whole destination is replaced, as
    Spark's deleteWithJob(dest) does before setupJob."""
    dest = dest_of(root)
    for rel, data in EXISTING.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    for rel in EXISTING_EMPTY_DIRS:
        (dest / rel).mkdir(parents=True, exist_ok=True)
    (dest / "_SUCCESS").write_bytes(PREVIOUS_SUCCESS)
    before = snapshot(root)
    config = config or fast_config()
    if mode == "static":
        JobCommitter(str(dest), JOB_ID, config=config).move_aside(str(dest))
    new_job(dest, job_id=JOB_ID, config=config)
    for t, files in TASKS.items():
        task_attempt(dest, t, 0, files, job_id=JOB_ID, config=config).commit()
    return before


def committer_for(root: Path, mode: str, store: ManagedStore | None = None,
                  config: CommitterConfig | None = None) -> JobCommitter:
    return JobCommitter(str(dest_of(root)), JOB_ID, config=config or fast_config(),
                        dynamic_partition_overwrite=mode == "dynamic", store=store)


def snapshot(root: Path) -> dict[str, Any]:
    """The destination as readers and the committer's history see it: every file's bytes and
    every directory, minus the committer's scratch space (``_temporary``, the lock directory);
    ``_SUCCESS`` and history records reduced to what is deterministic (whose, which files)."""
    out: dict[str, Any] = {}
    for rel, data in tree(dest_of(root)).items():
        top = rel.split("/", 1)[0]
        if top == "_temporary" or rel.startswith("_manifest_committer/lock") \
                or rel == "_manifest_committer/":
            continue
        if rel == "_SUCCESS" and data is not None:
            doc = orjson.loads(data)
            names = sorted(f.rpartition("/dest/")[2] for f in doc.get("filenames", []))
            out[rel] = (doc.get("jobId"), doc.get("success"), names)
        elif rel.startswith("_manifest_committer/history/") and data is not None:
            out[rel] = orjson.loads(data)["jobId"]
        else:
            out[rel] = data
    return out


def run_commit(root: str, mode: str) -> int:
    """The child's side: commit the scenario, dying by SIGKILL after ``$CRASH_ENV`` store calls
    if it is set; returns the number of store calls an uninterrupted commit made."""
    limit = os.environ.get(CRASH_ENV)
    counting = CountingLocalStore(crash_after(int(limit)) if limit else None)
    config = fast_config()
    store = ManagedStore(counting, config)
    committer_for(Path(root), mode, store, config).commit(committed_tasks())
    return counting.ops


def child_main(root: str, mode: str, crash_after: int | None) -> None:
    """Entry point of a forked child (``multiprocessing``): the kill switch is passed through
    the same environment variable the command line uses."""
    if crash_after is None:
        os.environ.pop(CRASH_ENV, None)
    else:
        os.environ[CRASH_ENV] = str(crash_after)
    ops = run_commit(root, mode)
    Path(root, "ops.txt").write_text(str(ops))


if __name__ == "__main__":
    print(run_commit(sys.argv[1], sys.argv[2]))
