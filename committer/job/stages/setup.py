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

from committer.errors import FormatError, JobConflictError, PathExistsError, StoreError
from committer.layout import JobLayout
from committer.store.managed import ManagedStore
from manifest_schema.records import JobMarker

MARKER_LIMIT = 65536


def read_job_marker(store: ManagedStore, layout: JobLayout) -> JobMarker | None:
    """Who set the job attempt up; ``None`` if nobody did (or cleanup removed the marker)."""
    data = store.read_if_exists(layout.job_marker, MARKER_LIMIT)
    return None if data is None else JobMarker.loads(data, layout.job_marker)


def setup_job(store: ManagedStore, layout: JobLayout) -> None:
    owner = JobMarker(layout.job_id, layout.attempt, socket.gethostname(), os.getpid(),
                      int(time.time() * 1000))
    try:
        store.write_bytes(layout.job_marker, orjson.dumps(owner.to_json()), exclusive=True)
    except PathExistsError:
        try:
            found = read_job_marker(store, layout)
            holder = "(gone)" if found is None else \
                f"{found.host} pid {found.pid} (job {found.job_id} attempt {found.attempt})"
        except (FormatError, StoreError) as e:
            holder = f"(unreadable: {e})"
        raise JobConflictError(
            f"job {layout.job_id} attempt {layout.attempt} is already set up under "
            f"{layout.attempt_dir} by {holder}; every job needs a unique id"
        ) from None
    store.mkdirs(layout.tasks_dir)
    store.mkdirs(layout.manifests_dir)
