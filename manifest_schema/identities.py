"""The record of a task attempt's source files as job commit found them before anything moved.

A manifest entry without an identity (``e``: Hadoop's task committer writes none on local
disk, HDFS and most stores) gives a later ``resume`` or ``rollback`` no way to prove that a file
at a destination is the one this job renamed there. Job commit therefore lists such a task
attempt's directory before its journal says ``planned`` and records, per source file, the size
and the identity the store reports (``Store.identity``: an etag a rename keeps, or a content
checksum a copy keeps) in ``identities/<taskAttemptId>.json`` (the committer's format, not
Hadoop's):

    {"version": 1, "jobId": "...", "taskAttemptID": "...",
     "files": [["<path below the task attempt directory>", <size>, "<identity>"], ...]}

One reader, :meth:`SourceIdentities.loads`, raises a :class:`FormatError` naming the file.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from manifest_schema.errors import FormatError
from manifest_schema.records import build, json_object

IDENTITIES_VERSION = 1


@dataclass(frozen=True)
class SourceIdentities:
    """Each source file of one task attempt: path below its directory -> (size, identity)."""

    job_id: str
    task_attempt_id: str
    files: dict[str, tuple[int, str]]

    WHAT = "source identity record"

    def to_json(self) -> dict[str, Any]:
        return {"version": IDENTITIES_VERSION, "jobId": self.job_id,
                "taskAttemptID": self.task_attempt_id,
                "files": [[rel, size, ident] for rel, (size, ident) in self.files.items()]}

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> SourceIdentities:
        doc = json_object(data, source, cls.WHAT)
        if doc.get("version") != IDENTITIES_VERSION:
            raise FormatError(source, "version",
                              f"unsupported {cls.WHAT} version {doc.get('version')!r}")

        def make() -> SourceIdentities:
            files: dict[str, tuple[int, str]] = {}
            for rel, size, ident in doc["files"]:
                if not isinstance(rel, str) or not isinstance(ident, str) \
                        or not isinstance(size, int) or size < 0:
                    raise ValueError(f"bad file entry {[rel, size, ident]!r}")
                files[rel] = (size, ident)
            return cls(str(doc["jobId"]), str(doc["taskAttemptID"]), files)

        return build(source, cls.WHAT, make)
