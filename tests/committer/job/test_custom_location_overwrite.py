"""Dynamic partition overwrite of custom partition locations (Spark's
``ALTER TABLE ... ADD PARTITION ... LOCATION``): the location a job writes into is replaced, as
Spark's own protocol replaces it, and a failed commit puts the old data back."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from committer import JobCommitter
from committer.errors import ManifestCommitterError
from committer.job.durability.transaction import partitions_to_replace
from committer.job.stages.plan import JobPlan, RenamePlan
from committer.store import open_store
from committer.store.local import LocalStore
from manifest_schema.uris import local_path, location_to_uri
from tests.committer.helpers import JOB_ID, fast_config, new_job, task_attempt, tree, visible_files

STAGED = "staged-for-custom"


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _job_writing_custom(dest: Path, custom: Path, **kwargs: object) -> tuple[JobCommitter,
                                                                             dict[str, str]]:
    """Task 0 writes ``p=1/new.csv`` under dest and ``new9.csv`` into ``custom``: the shim's
    manifest shape (the file's destination is absolute, the custom root a level-0 directory)."""
    job = new_job(dest, dynamic_partition_overwrite=True, **kwargs)  # type: ignore[arg-type]
    ta = task_attempt(dest, 0, 0, {"p=1/new.csv": b"new1", f"{STAGED}/new9.csv": b"new9"})
    manifest = ta.commit()
    path = Path(local_path(ta.layout.manifest_path(ta.task_id)))
    doc = orjson.loads(path.read_bytes())
    for entry in doc["files"]:
        if f"/{STAGED}/" in entry["d"]:
            entry["d"] = location_to_uri(str(custom / "new9.csv"))
    doc["directories"] = [d for d in doc["directories"] if STAGED not in d["d"]]
    doc["directories"].append({"d": location_to_uri(str(custom)), "t": 0, "l": 0})
    path.write_bytes(orjson.dumps(doc))
    return job, {manifest.task_id: manifest.task_attempt_id}


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    dest = tmp_path / "table"
    custom = tmp_path / "custom location ü" / "p=9"
    other = tmp_path / "custom location ü" / "p=8"
    _write(dest, {"p=1/old.csv": b"old1", "p=2/old.csv": b"old2"})
    _write(custom, {"old9.csv": b"old9", "sub/old9b.csv": b"old9b"})
    _write(other, {"old8.csv": b"old8"})
    return dest, custom, other


def test_partitions_to_replace_covers_extra_roots_but_never_the_destination() -> None:
    plan = JobPlan(RenamePlan())
    plan.partitions = {"/t", "/t/p=1", "/c/p=9", "/c/p=9/q=1", "/c/p=8x", "/elsewhere/p=2", "/"}
    assert partitions_to_replace(plan, "/t") == ["/t/p=1"]
    assert partitions_to_replace(plan, "/t", ["/c/p=9/"]) == ["/c/p=9", "/c/p=9/q=1", "/t/p=1"]


def test_dynamic_overwrite_replaces_a_custom_location_it_writes(
        layout: tuple[Path, Path, Path]) -> None:
    dest, custom, other = layout
    job, committed = _job_writing_custom(dest, custom)
    job.commit(committed, extra_destination_roots=[str(custom)])
    assert tree(custom) == {"new9.csv": b"new9"}  # old files and subdirectory replaced
    assert tree(other) == {"old8.csv": b"old8"}  # a custom location not written: untouched
    assert visible_files(dest) == {"p=1/new.csv": b"new1", "p=2/old.csv": b"old2"}
    assert not (dest / "_temporary").exists()


class _FailingRename(LocalStore):
    """Fails the rename of the file bound for the custom location (after the others)."""

    def rename_file(self, src: str, dst: str) -> None:
        if dst.endswith("/new9.csv"):
            raise OSError("injected rename failure")
        super().rename_file(src, dst)


def test_failed_commit_then_abort_restores_the_custom_location(
        layout: tuple[Path, Path, Path]) -> None:
    dest, custom, other = layout
    before = {"dest": visible_files(dest), "custom": tree(custom), "other": tree(other)}
    store = open_store(str(dest), fast_config(), backend=_FailingRename())
    job, committed = _job_writing_custom(dest, custom, store=store)
    with pytest.raises(ManifestCommitterError):
        job.commit(committed, extra_destination_roots=[str(custom)])
    assert not (custom / "old9.csv").exists()  # moved aside while the commit ran
    JobCommitter(str(dest), JOB_ID, config=fast_config(), dynamic_partition_overwrite=True).abort()
    after = {"dest": visible_files(dest), "custom": tree(custom), "other": tree(other)}
    assert after == before
    assert not (dest / "_temporary").exists()
