"""Job commit, stage 5: the summary, saved atomically as ``_SUCCESS``, and its report copies.

(When a commit runs under a journal, the transaction first moves a previous job's ``_SUCCESS``
aside and afterwards records the commit in the destination's history: ``durability/``.)

The same document is the ``_SUCCESS`` marker (on success), the copy in the summary report
directory (on success *and* failure, named ``summary-<jobId>.json``), and what the Python API and
the CLI return.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from datetime import datetime, timezone

from committer import statistics as st
from committer.config import CommitterConfig
from committer.layout import JobLayout, report_path
from committer.store import open_store
from committer.store.managed import ManagedStore
from manifest_schema import SuccessData

LOG = logging.getLogger("committer.job")

METRICS = (
    st.COMMITTER_FILES_COMMITTED,
    st.COMMITTER_BYTES_COMMITTED,
    st.COMMITTER_TASKS_COMPLETED,
    st.RENAME_RECOVERED,
    st.STORE_IO_RETRY,
    st.STORE_IO_THROTTLED,
)


def build_summary(
    layout: JobLayout,
    store: ManagedStore,
    *,
    success: bool,
    stage: str,
    filenames: list[str],
    diagnostics: Mapping[str, str],
    description: str,
) -> SuccessData:
    now = time.time()
    store.count_requests()
    stats = store.stats.snapshot()
    metrics = {name: stats.counters.get(name, 0) for name in METRICS}
    return SuccessData(
        job_id=layout.job_id,
        success=success,
        timestamp=int(now * 1000),
        date=datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
        hostname=socket.gethostname(),
        description=description,
        job_id_source="spark.sql.sources.writeJobUUID",
        metrics=metrics,
        diagnostics=dict(diagnostics),
        filenames=tuple(filenames),
        iostatistics=stats,
        state="COMMITTED" if success else "FAILED",
        stage=stage,
    )


def save_success_marker(store: ManagedStore, layout: JobLayout, summary: SuccessData) -> None:
    """Write to a temporary name inside the job directory, then move over ``_SUCCESS``."""
    t0 = time.perf_counter()
    store.save_atomic(layout.success_marker, summary.dumps(), temp_path=layout.success_temp)
    store.stats.timed(st.STAGE_SAVE_SUCCESS, time.perf_counter() - t0)


def save_report(config: CommitterConfig, summary: SuccessData) -> str | None:
    """Copy the summary to the report directory, if one is configured; never raises."""
    directory = config.summary_report_directory
    if not directory:
        return None
    path = report_path(directory, summary.job_id)
    try:
        with open_store(directory, config) as report_store:
            report_store.write_bytes(path, summary.dumps())
    except Exception:
        LOG.exception("could not save the job summary report to %s", path)
        return None
    return path
