"""The task manifest: Hadoop's ``TaskManifest/1``, field for field.

Two ways in:
- :meth:`TaskManifest.loads` builds the typed model (CLI, tests, Python writers);
- :func:`parse_document` + :func:`iter_file_entries` validate a parsed document and yield plain
  tuples, for job commit, which streams millions of entries and cannot afford an object each.

Both apply the same rules (those of Hadoop's ``validate()`` and more): the right ``type`` and
``version``; ids present; every file with a source, a destination and a non-negative integer
size; every directory with a path and a known status; no destination listed twice. Unknown fields
are ignored, as Hadoop's loader ignores them; ``null`` fields are omitted on save, as it omits them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import orjson

from manifest_schema.errors import FormatError
from manifest_schema.iostatistics import IOStatisticsSnapshot

TASK_MANIFEST_TYPE = (
    "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1"
)
TASK_MANIFEST_VERSION = 1


class DirStatus(IntEnum):
    """Hadoop's ``EntryStatus`` codes for a destination directory."""

    UNKNOWN = 0
    NOT_FOUND = 1
    FILE = 2  # a file stands where the directory must go
    DIR = 3
    CREATED_DIR = 4


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file to rename: URIs as Hadoop writes them (``s``, ``d``, ``z``, ``e``)."""

    source: str
    dest: str
    size: int
    etag: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"s": self.source, "d": self.dest, "z": self.size}
        if self.etag is not None:
            out["e"] = self.etag
        return out


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One destination directory: URI, status when scanned, depth below the destination."""

    dest: str
    status: DirStatus
    level: int

    def to_json(self) -> dict[str, Any]:
        return {"d": self.dest, "t": int(self.status), "l": self.level}


@dataclass(frozen=True)
class TaskManifest:
    job_id: str
    job_attempt_number: int
    task_id: str
    task_attempt_id: str
    task_attempt_dir: str
    files: tuple[FileEntry, ...] = ()
    directories: tuple[DirEntry, ...] = ()
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    extra_data: Mapping[str, str] = field(default_factory=dict)

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": TASK_MANIFEST_TYPE,
            "version": TASK_MANIFEST_VERSION,
            "jobId": self.job_id,
            "jobAttemptNumber": self.job_attempt_number,
            "taskID": self.task_id,
            "taskAttemptID": self.task_attempt_id,
            "taskAttemptDir": self.task_attempt_dir,
            "files": [f.to_json() for f in self.files],
            "directories": [d.to_json() for d in self.directories],
            "iostatistics": self.iostatistics.to_json(),
            "extraData": dict(self.extra_data),
        }

    def dumps(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def loads(cls, data: bytes, source: str = "<memory>") -> TaskManifest:
        doc = parse_document(data, source)
        files = tuple(FileEntry(s, d, z, e) for s, d, z, e in iter_file_entries(doc, source))
        return cls(
            job_id=doc["jobId"],
            job_attempt_number=doc.get("jobAttemptNumber") or 0,
            task_id=doc["taskID"],
            task_attempt_id=doc["taskAttemptID"],
            task_attempt_dir=doc.get("taskAttemptDir") or "",
            files=files,
            directories=tuple(iter_dir_entries(doc, source)),
            iostatistics=IOStatisticsSnapshot.from_json(doc.get("iostatistics"), source),
            extra_data=_string_map(doc.get("extraData"), source, "extraData"),
        )


def _string_map(value: Any, source: str, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise FormatError(source, where, "must be an object of strings")
    return value


def _require_str(doc: Mapping[str, Any], key: str, source: str, *, required: bool = True) -> None:
    v = doc.get(key)
    if v is None:
        if required:
            raise FormatError(source, key, "is missing")
        return
    if not isinstance(v, str) or not v:
        raise FormatError(source, key, "must be a non-empty string")


def parse_document(data: bytes, source: str) -> dict[str, Any]:
    """Parse and check the header of a task manifest; entries are checked as they are read."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        reason = "is empty" if not data.strip() else f"is not valid JSON ({e})"
        raise FormatError(source, "", reason) from None
    if not isinstance(doc, dict):
        raise FormatError(source, "", "is not a JSON object")
    kind = doc.get("type")
    if kind != TASK_MANIFEST_TYPE:
        raise FormatError(source, "type",
                          f"is {kind!r}, not a task manifest ({TASK_MANIFEST_TYPE})")
    version = doc.get("version")
    if version != TASK_MANIFEST_VERSION or isinstance(version, bool):
        raise FormatError(source, "version", f"is {version!r}; only version 1 is understood")
    for key in ("jobId", "taskID", "taskAttemptID"):
        _require_str(doc, key, source)
    _require_str(doc, "taskAttemptDir", source, required=False)
    attempt = doc.get("jobAttemptNumber", 0)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise FormatError(source, "jobAttemptNumber", "must be a non-negative integer")
    for key in ("files", "directories"):
        if not isinstance(doc.get(key) or [], list):
            raise FormatError(source, key, "must be an array")
    return doc


def iter_file_entries(
    doc: Mapping[str, Any], source: str
) -> Iterator[tuple[str, str, int, str | None]]:
    """Yield ``(source URI, dest URI, size, etag)`` per file, checking each; a destination
    listed twice in one manifest is an error, as in Hadoop's ``validate()``."""
    seen: set[str] = set()
    for i, entry in enumerate(doc.get("files") or ()):
        if not isinstance(entry, dict):
            raise FormatError(source, f"files[{i}]", "must be an object")
        s, d, z, e = entry.get("s"), entry.get("d"), entry.get("z"), entry.get("e")
        if not isinstance(s, str) or not s:
            raise FormatError(source, f"files[{i}].s", "source must be a non-empty string")
        if not isinstance(d, str) or not d:
            raise FormatError(source, f"files[{i}].d", "destination must be a non-empty string")
        if not isinstance(z, int) or isinstance(z, bool) or z < 0:
            raise FormatError(source, f"files[{i}].z", f"size must be an integer >= 0, got {z!r}")
        if e is not None and not isinstance(e, str):
            raise FormatError(source, f"files[{i}].e", "etag must be a string")
        if d in seen:
            raise FormatError(source, f"files[{i}].d", f"destination listed twice: {d}")
        seen.add(d)
        yield s, d, z, e


def iter_dir_entries(doc: Mapping[str, Any], source: str) -> Iterator[DirEntry]:
    for i, entry in enumerate(doc.get("directories") or ()):
        if not isinstance(entry, dict):
            raise FormatError(source, f"directories[{i}]", "must be an object")
        d, t, lvl = entry.get("d"), entry.get("t", 0), entry.get("l", 0)
        if not isinstance(d, str) or not d:
            raise FormatError(source, f"directories[{i}].d", "must be a non-empty string")
        if not isinstance(t, int) or isinstance(t, bool) or t not in DirStatus._value2member_map_:
            raise FormatError(source, f"directories[{i}].t", f"unknown directory status {t!r}")
        if not isinstance(lvl, int) or isinstance(lvl, bool) or lvl < 0:
            raise FormatError(source, f"directories[{i}].l", "level must be an integer >= 0")
        yield DirEntry(d, DirStatus(t), lvl)
