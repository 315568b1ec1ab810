"""The committer's own small documents: job marker, destination lease, history record, and the
record of a path moved aside. The commit journal, the largest, is in ``journal.py``.

Each is a frozen model with ``to_json`` and one reader, ``loads(data, source)``, that raises a
:class:`FormatError` naming the file and what is wrong with it. The committer writes these
documents whole (create-exclusive, or write then replace), so one that cannot be read is
damage, never a torn write; what to do about damage is the caller's decision.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from manifest_schema.errors import FormatError
from manifest_schema.success_data import SuccessData

T = TypeVar("T")


def json_object(data: builtins.bytes, source: str, what: str) -> dict[str, Any]:
    """``data`` as a JSON object, else a ``FormatError`` naming ``source`` and ``what``."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise FormatError(source, "", f"{what} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FormatError(source, "", f"{what} is not a JSON object")
    return doc


def build(source: str, what: str, make: Callable[[], T]) -> T:
    """``make()``, with a missing or mistyped field reported as a ``FormatError``."""
    try:
        return make()
    except FormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise FormatError(source, "", f"malformed {what}: {type(e).__name__} {e}") from None


@dataclass(frozen=True)
class JobMarker:
    """``_job.json``: which process set the job attempt up (created exclusively)."""

    job_id: str
    attempt: int
    host: str
    pid: int
    created_ms: int

    WHAT = "job marker"

    def to_json(self) -> dict[str, Any]:
        return {"jobId": self.job_id, "attempt": self.attempt, "host": self.host,
                "pid": self.pid, "created": self.created_ms}

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> JobMarker:
        doc = json_object(data, source, cls.WHAT)
        return build(source, cls.WHAT, lambda: cls(
            str(doc["jobId"]), int(doc["attempt"]), str(doc["host"]), int(doc["pid"]),
            int(doc["created"])))


@dataclass(frozen=True)
class LeaseRecord:
    """One generation of the destination lock: who holds it, until when."""

    job_id: str
    owner: str  # unique token of the holder
    host: str
    pid: int
    acquired_ms: int
    expires_ms: int
    purpose: str
    released: bool = False

    WHAT = "lock lease"

    def to_json(self) -> dict[str, Any]:
        return {"jobId": self.job_id, "owner": self.owner, "host": self.host, "pid": self.pid,
                "acquired": self.acquired_ms, "expires": self.expires_ms,
                "purpose": self.purpose, "released": self.released}

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> LeaseRecord:
        doc = json_object(data, source, cls.WHAT)
        return build(source, cls.WHAT, lambda: cls(
            str(doc["jobId"]), str(doc["owner"]), str(doc["host"]), int(doc["pid"]),
            int(doc["acquired"]), int(doc["expires"]), str(doc.get("purpose", "commit")),
            bool(doc.get("released", False))))


@dataclass(frozen=True)
class MovedAside:
    """Data that was at ``original`` and now lives at ``aside`` (inside the job directory);
    also the record written before a path outside the destination is moved aside."""

    original: str
    aside: str

    WHAT = "move-aside record"

    def to_json(self) -> dict[str, Any]:
        return {"original": self.original, "aside": self.aside}

    @classmethod
    def from_json(cls, doc: Any) -> MovedAside:
        return cls(str(doc["original"]), str(doc["aside"]))

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> MovedAside:
        doc = json_object(data, source, cls.WHAT)
        return build(source, cls.WHAT, lambda: cls.from_json(doc))


@dataclass(frozen=True)
class HistoryRecord:
    """``_manifest_committer/history/<jobId>.json``: one committed job, with its summary."""

    job_id: str
    attempt: int
    mode: str
    committed_ms: int
    files: int
    bytes: int
    tasks: int
    summary: dict[str, Any]  # the _SUCCESS document of the commit

    WHAT = "commit history record"

    def to_json(self) -> dict[str, Any]:
        return {"jobId": self.job_id, "attempt": self.attempt, "mode": self.mode,
                "committed": self.committed_ms, "files": self.files, "bytes": self.bytes,
                "tasks": self.tasks, "summary": self.summary}

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> HistoryRecord:
        doc = json_object(data, source, cls.WHAT)
        return build(source, cls.WHAT, lambda: cls(
            str(doc["jobId"]), int(doc["attempt"]), str(doc["mode"]), int(doc["committed"]),
            int(doc["files"]), int(doc["bytes"]), int(doc.get("tasks", 0)),
            dict(doc["summary"])))

    def success_data(self) -> SuccessData:
        return SuccessData.loads(orjson.dumps(self.summary))
