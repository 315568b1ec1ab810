"""Job setup: create the job attempt directory, refusing a job id that is already in use.

The job marker ``<attempt dir>/_job.json`` is created exclusively (an atomic create-if-absent
on every store), so two jobs that were handed the same id (SPARK-33402, SPARK-33230,
HADOOP-17318) cannot both set up: the second gets a ``JobConflictError`` naming the first.
"""

from __future__ import annotations

import os
import socket
import time

import orjson

from committer.errors import JobConflictError, PathExistsError
from committer.layout import JobLayout, join
from committer.store.managed import ManagedStore

JOB_MARKER = "_job.json"


def job_marker_path(layout: JobLayout) -> str:
    return join(layout.attempt_dir, JOB_MARKER)


def setup_job(store: ManagedStore, layout: JobLayout) -> None:
    marker = job_marker_path(layout)
    owner = {
        "jobId": layout.job_id,
        "attempt": layout.attempt,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "created": int(time.time() * 1000),
    }
    try:
        store.write_bytes(marker, orjson.dumps(owner), exclusive=True)
    except PathExistsError:
        try:
            holder = store.read_bytes(marker, limit=65536).decode("utf-8", "replace")
        except Exception:
            holder = "(unreadable)"
        raise JobConflictError(
            f"job {layout.job_id} attempt {layout.attempt} is already set up under "
            f"{layout.attempt_dir} by {holder}; every job needs a unique id"
        ) from None
    store.mkdirs(layout.tasks_dir)
    store.mkdirs(layout.manifests_dir)
