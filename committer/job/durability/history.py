"""Per-destination commit history, and what makes a repeated commit a no-op.

One small file per committed job, ``<dest>/_manifest_committer/history/<jobId>.json`` (Spark and
Hive readers skip names starting with ``_``). One file per commit means concurrent jobs never
read-modify-write a shared log, and looking a job id up is a single read. Each record keeps the
first commit's ``_SUCCESS`` summary, which a repeated commit of the same job id returns (the txid
idea of transactional stream sinks: a driver that retries a commit it already made changes
nothing).
"""

from __future__ import annotations

import orjson

from committer.errors import FormatError, PathNotFoundError, StoreError
from committer.layout import basename, history_dir, history_record_job, history_record_path
from committer.store.managed import ManagedStore
from manifest_schema.records import HistoryRecord

RECORD_LIMIT = 64 * 1024 * 1024


def write_record(store: ManagedStore, dest: str, record: HistoryRecord, temp_path: str,
                 make_dir: bool = True) -> None:
    """Saved whole (write then replace) so a reader never sees half a record; ``make_dir``:
    False when the caller made the history's directory already."""
    if make_dir:
        store.mkdirs(history_dir(dest))
    store.save_atomic(history_record_path(dest, record.job_id), orjson.dumps(record.to_json()),
                      temp_path=temp_path)


def read_record(store: ManagedStore, dest: str, job_id: str) -> HistoryRecord | None:
    """The record of ``job_id``, ``None`` if it never committed here; a ``FormatError``
    naming the file if the record cannot be read."""
    path = history_record_path(dest, job_id)
    data = store.read_if_exists(path, RECORD_LIMIT)
    return None if data is None else HistoryRecord.loads(data, path)


def delete_record(store: ManagedStore, dest: str, job_id: str) -> None:
    """Rollback of a commit that had already recorded itself; empty directories go too."""
    store.delete_file(history_record_path(dest, job_id))
    directory = history_dir(dest)
    if store.remove_dir_if_empty(directory):
        store.remove_dir_if_empty(directory.rpartition("/")[0])


def list_history(store: ManagedStore, dest: str) -> list[HistoryRecord]:
    """Every recorded commit on ``dest``, oldest first; unreadable records are skipped."""
    try:
        listing = store.list_dir(history_dir(dest))
    except PathNotFoundError:
        return []
    out = []
    for st in listing:
        job_id = history_record_job(basename(st.path))
        if st.is_dir or job_id is None:
            continue
        try:
            record = read_record(store, dest, job_id)
        except (FormatError, StoreError):
            continue
        if record is not None:
            out.append(record)
    return sorted(out, key=lambda r: (r.committed_ms, r.job_id))
