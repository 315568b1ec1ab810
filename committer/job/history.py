"""Per-destination commit history, and what makes a repeated commit a no-op.

One small file per committed job, ``<dest>/_manifest_committer/history/<jobId>.json`` (Spark and
Hive readers skip names starting with ``_``). One file per commit means concurrent jobs never
read-modify-write a shared log, and looking a job id up is a single read. Each record keeps the
first commit's ``_SUCCESS`` summary, which a repeated commit of the same job id returns (the txid
idea of transactional stream sinks: a driver that retries a commit it already made changes
nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from committer.errors import FormatError, PathNotFoundError, StoreError
from committer.job.journal import read_json_object
from committer.layout import join
from committer.store.managed import ManagedStore
from manifest_schema import SuccessData

HISTORY_DIR = "_manifest_committer/history"
RECORD_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class HistoryRecord:
    job_id: str
    attempt: int
    mode: str
    committed_ms: int
    files: int
    bytes: int
    tasks: int
    summary: dict[str, Any]  # the _SUCCESS document of the commit

    def to_json(self) -> dict[str, Any]:
        return {"jobId": self.job_id, "attempt": self.attempt, "mode": self.mode,
                "committed": self.committed_ms, "files": self.files, "bytes": self.bytes,
                "tasks": self.tasks, "summary": self.summary}

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str) -> HistoryRecord:
        try:
            return cls(str(doc["jobId"]), int(doc["attempt"]), str(doc["mode"]),
                       int(doc["committed"]), int(doc["files"]), int(doc["bytes"]),
                       int(doc.get("tasks", 0)), dict(doc["summary"]))
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(where, "", f"malformed commit history record: {e}") from None

    def success_data(self) -> SuccessData:
        return SuccessData.loads(orjson.dumps(self.summary))


def history_dir(dest: str) -> str:
    return join(dest, HISTORY_DIR)


def record_path(dest: str, job_id: str) -> str:
    return join(history_dir(dest), f"{job_id}.json")


def write_record(store: ManagedStore, dest: str, record: HistoryRecord, temp_path: str) -> None:
    """Saved whole (write then replace) so a reader never sees half a record."""
    store.mkdirs(history_dir(dest))
    store.save_atomic(record_path(dest, record.job_id), orjson.dumps(record.to_json()),
                      temp_path=temp_path)


def read_record(store: ManagedStore, dest: str, job_id: str) -> HistoryRecord | None:
    path = record_path(dest, job_id)
    doc = read_json_object(store, path, RECORD_LIMIT, "commit history record")
    return None if doc is None else HistoryRecord.from_json(doc, path)


def delete_record(store: ManagedStore, dest: str, job_id: str) -> None:
    """Rollback of a commit that had already recorded itself; empty directories go too."""
    store.delete_file(record_path(dest, job_id))
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
        name = st.path.rstrip("/").rsplit("/", 1)[-1]
        if st.is_dir or not name.endswith(".json"):
            continue
        try:
            record = read_record(store, dest, name[: -len(".json")])
        except (FormatError, StoreError):
            continue
        if record is not None:
            out.append(record)
    return sorted(out, key=lambda r: (r.committed_ms, r.job_id))
