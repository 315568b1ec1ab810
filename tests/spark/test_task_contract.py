"""One task-commit contract: the Python task committer and the shim's Java one, given the same
task attempt directory, save the same manifest, and save it atomically.

Both committers are pointed at the very same attempt directory (the layouts name it alike), so
every identity field, etags included, must match exactly; only timings and the writer's own
``extraData`` may differ. Order of entries is not part of the contract.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from committer import TaskAttemptCommitter
from committer.layout import CUSTOM_LOCATIONS_DIR
from committer.store.local import file_etag
from manifest_schema import DirStatus
from manifest_schema.uris import uri_to_location
from tests.spark.helpers import WAIT_S
from tests.spark.task_driver import TaskDriver

pytestmark = pytest.mark.spark

# Relative path -> content. Spaces, unicode, '%', '=', '#', '+', zero-length files, deep nesting.
TREE = {
    "top level.txt": b"top",
    "p=a b/q=ü%3A/part 0.csv": b"a,b\n",
    "p=a b/q=ü%3A/zero.bin": b"",
    "p=1/q=2/file=x #1+2.txt": b"x" * 1000,
    "p=1/zero.bin": b"",
    "deep/a/b/c/d/e.txt": b"deep",
    "100%/ä ö/ß.txt": b"percent",
}
EMPTY_DIRS = ("empty dir", "p=1/empty sub", "deep/a/b/nothing here")
CHECKSUMS = {"p=1/.zero.bin.crc": b"crc", "checksums only/.gone.crc": b"crc"}
IDENTITY = ("type", "version", "jobId", "jobAttemptNumber", "taskID", "taskAttemptID",
            "taskAttemptDir")
COUNTERS = ("committer_task_file_count", "committer_task_file_size",
            "committer_task_directory_count")


def build_attempt_dir(root: Path) -> None:
    for rel, data in {**TREE, **CHECKSUMS}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    for rel in EMPTY_DIRS:
        (root / rel).mkdir(parents=True, exist_ok=True)


def manifest_doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


def test_python_and_java_task_commit_save_the_same_manifest(
    spark: Any, spark_work_dir: Path, no_coordinator: None
) -> None:
    dest = spark_work_dir / "contract dest ü %"
    custom = spark_work_dir / "contract custom=1 ü"
    driver = TaskDriver(spark, dest)
    driver.protocol.setupJob(driver.job_ctx)
    ctx = driver.task(3, 1)
    driver.protocol.setupTask(ctx)
    work = driver.attempt_dir(ctx)
    build_attempt_dir(work)
    spec = driver.jvm.org.apache.spark.internal.io.FileNameSpec("", ".txt")
    staged = str(driver.protocol.newTaskTempFileAbsPath(ctx, str(custom), spec))
    driver.create(staged, b"custom location")

    attempt_id = str(ctx.getTaskAttemptID())
    task_id = str(ctx.getTaskAttemptID().getTaskID())
    python_ta = TaskAttemptCommitter(str(dest), driver.job_id, task_id, attempt_id)
    assert python_ta.working_dir == str(work)
    # The Python API stages a custom-location file exactly where the shim does.
    name = staged.rsplit("/", 1)[1]
    assert uri_to_location(staged) == python_ta.output_path_at(str(custom), name)
    manifest_path = Path(python_ta.layout.manifest_path(task_id))

    driver.protocol.commitTask(ctx)
    java = manifest_doc(manifest_path)
    python_ta.commit()
    python = manifest_doc(manifest_path)

    for key in IDENTITY:
        assert python[key] == java[key], key
    assert (python["jobId"], python["taskID"], python["taskAttemptID"]) == (
        driver.job_id, task_id, attempt_id)

    def files(doc: dict[str, Any]) -> dict[str, tuple[str, int, str | None]]:
        return {f["d"]: (f["s"], f["z"], f.get("e")) for f in doc["files"]}

    assert files(python) == files(java)
    by_location = {uri_to_location(d): v for d, v in files(java).items()}
    custom_file = f"{custom}/{name}"
    assert set(by_location) == {f"{dest}/{rel}" for rel in TREE} | {custom_file}
    for rel, data in TREE.items():
        source, size, etag = by_location[f"{dest}/{rel}"]
        assert uri_to_location(source) == f"{work}/{rel}"
        assert size == len(data)
        assert etag == file_etag(os.stat(work / rel))  # the engine's identity of a local file
    source, size, _ = by_location[custom_file]
    assert uri_to_location(source) == f"{work}/{CUSTOM_LOCATIONS_DIR}/0/{name}"
    assert size == len(b"custom location")

    def dirs(doc: dict[str, Any]) -> set[tuple[str, int, int]]:
        return {(d["d"], d["t"], d["l"]) for d in doc["directories"]}

    assert dirs(python) == dirs(java)
    # Every directory holding output, none for empty ones, checksum-only ones or custom ones.
    expected_dirs = {"/".join(rel.split("/")[:depth]) for rel in TREE
                     for depth in range(1, rel.count("/") + 1)}
    assert {(uri_to_location(d)[len(str(dest)) + 1:], lvl) for d, _, lvl in dirs(java)} == {
        (d, d.count("/") + 1) for d in expected_dirs}
    assert {t for _, t, _ in dirs(java)} == {int(DirStatus.UNKNOWN)}

    for counter in COUNTERS:
        assert (python["iostatistics"]["counters"][counter]
                == java["iostatistics"]["counters"][counter]), counter
    assert java["iostatistics"]["counters"]["committer_task_file_count"] == len(TREE) + 1
    assert not list(manifest_path.parent.glob("*.tmp")), "a temporary manifest was left"
    driver.protocol.abortJob(driver.job_ctx)


WATCHER = textwrap.dedent("""
    import mmap, os, struct, sys
    target, stop, counts = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(counts, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 16)
    polls = misses = 0
    while not os.path.exists(stop):
        for _ in range(200):
            polls += 1
            try:
                os.stat(target)
            except FileNotFoundError:
                misses += 1
        struct.pack_into("<qq", shared, 0, polls, misses)  # how far it got, for the test
    print(polls, misses)
""")


class Watch:
    """What the watcher has done so far, read from the memory it shares with the test."""

    def __init__(self, shared: mmap.mmap) -> None:
        self._shared = shared
        self._seen = 0
        self.polls = self.misses = 0

    def _read(self) -> int:
        polls, _misses = struct.unpack_from("<qq", self._shared, 0)
        return int(polls)

    def more(self, polls: int) -> None:
        """Wait until the watcher has looked ``polls`` more times since the last call (a
        generous wait: it is a process of its own, as slow as the machine makes it)."""
        want = self._seen + polls
        deadline = time.monotonic() + WAIT_S
        while self._read() < want:
            assert time.monotonic() < deadline, "the watcher stopped looking"
            time.sleep(0.001)
        self._seen = self._read()


@contextmanager
def watching(path: Path) -> Iterator[Watch]:
    """A separate process stats ``path`` without pause while the block runs; the watch says
    how often it looked, and after the block how often the file was missing."""
    stop = path.parent / f".stop-{os.getpid()}"
    counts = path.parent / f".counts-{os.getpid()}"
    counts.write_bytes(bytes(16))
    proc = subprocess.Popen([sys.executable, "-c", WATCHER, str(path), str(stop), str(counts)],
                            stdout=subprocess.PIPE, text=True)
    with counts.open("r+b") as f:
        shared = mmap.mmap(f.fileno(), 16)
    watch = Watch(shared)
    try:
        watch.more(200)  # it is looking
        yield watch
    finally:
        stop.touch()
        out, _ = proc.communicate(timeout=WAIT_S)
        stop.unlink()
        shared.close()
        counts.unlink()
    watch.polls, watch.misses = (int(x) for x in out.split())


SAVES = 60


@pytest.mark.parametrize("side", ["java", "python"])
def test_a_later_attempt_replaces_the_manifest_with_never_a_moment_without_one(
    spark: Any, spark_work_dir: Path, no_coordinator: None, side: str
) -> None:
    dest = spark_work_dir / f"atomic save {side}"
    driver = TaskDriver(spark, dest)
    driver.protocol.setupJob(driver.job_ctx)
    task_id = str(driver.task(0, 0).getTaskAttemptID().getTaskID())

    def commit(attempt: int) -> None:
        ctx = driver.task(0, attempt)
        attempt_id = str(ctx.getTaskAttemptID())
        if side == "java":
            driver.protocol.setupTask(ctx)
            driver.write(ctx, "p=1", b"attempt %d" % attempt)
            driver.protocol.commitTask(ctx)
        else:
            ta = TaskAttemptCommitter(str(dest), driver.job_id, task_id, attempt_id)
            ta.setup()
            with ta.open_output("p=1/part.txt") as f:
                f.write(b"attempt %d" % attempt)
            ta.commit()

    commit(0)
    manifest = dest / "_temporary" / f"manifest_{driver.job_id}" / "00" / "manifests" / (
        f"{task_id}-manifest.json")
    assert manifest.is_file()
    with watching(manifest) as seen:
        for attempt in range(1, SAVES + 1):
            commit(attempt)
            seen.more(200)  # it was still looking after this save, and so as the next began
    assert seen.polls >= (SAVES + 1) * 200  # it really watched throughout
    assert seen.misses == 0, f"the manifest was missing {seen.misses} times of {seen.polls}"
    assert manifest_doc(manifest)["taskAttemptID"].endswith(f"_{SAVES}")
    assert not list(manifest.parent.glob("*.tmp"))
    driver.protocol.abortJob(driver.job_ctx)
