"""Helpers for the core suites: build task output through the public API, snapshot trees."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from committer import CommitterConfig, JobCommitter, TaskAttemptCommitter, task_ids
from committer.store import ManagedStore

JOB_ID = "job_20260101_0001"


def fast_config(**changes: Any) -> CommitterConfig:
    """Few threads and millisecond retry back-off, so failure paths run quickly."""
    values: dict[str, Any] = {
        "io_threads": 4,
        "retry_initial_delay_ms": 1,
        "retry_max_delay_ms": 4,
    }
    values.update(changes)
    return CommitterConfig(**values)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and directory (``None``) below ``root``, by relative path."""
    out: dict[str, bytes | None] = {}
    for here, dirs, files in os.walk(root):
        rel_here = os.path.relpath(here, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel_here, d)) + "/"] = None
        for f in files:
            out[os.path.normpath(os.path.join(rel_here, f))] = Path(here, f).read_bytes()
    return out


def visible_files(root: Path) -> dict[str, bytes]:
    """Data files as a reader of the table sees them: no ``_``/``.`` hidden path segments."""
    out: dict[str, bytes] = {}
    for rel, data in tree(root).items():
        if data is None:
            continue
        if any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue
        out[rel] = data
    return out


def write_files(ta: TaskAttemptCommitter, files: Mapping[str, bytes]) -> None:
    for rel, data in files.items():
        path = Path(ta.output_path(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def task_attempt(
    dest: Path | str,
    task: int,
    attempt: int,
    files: Mapping[str, bytes],
    *,
    job_id: str = JOB_ID,
    config: CommitterConfig | None = None,
    store: ManagedStore | None = None,
) -> TaskAttemptCommitter:
    """A task attempt that has set up and written ``files`` (not yet committed)."""
    task_id, attempt_id = task_ids(job_id, task, attempt)
    ta = TaskAttemptCommitter(str(dest), job_id, task_id, attempt_id,
                              config=config or fast_config(), store=store)
    ta.setup()
    write_files(ta, files)
    return ta


def new_job(dest: Path | str, *, job_id: str = JOB_ID, config: CommitterConfig | None = None,
            store: ManagedStore | None = None, **kwargs: Any) -> JobCommitter:
    job = JobCommitter(str(dest), job_id, config=config or fast_config(), store=store, **kwargs)
    job.setup()
    return job
