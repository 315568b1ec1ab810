"""The record of source files as job commit found them before anything moved.

A manifest entry without an identity (``e``: Hadoop's task committer writes none on local
disk, HDFS and most stores) gives a later ``resume`` or ``rollback`` no way to prove that a file
at a destination is the one this job renamed there. Job commit therefore identifies such
sources before its journal says ``planned`` and records, per source file, the size and the
identity the store reports (``Store.identity``: an etag a rename keeps, or a content checksum
its copy keeps) under ``identities/`` in the job attempt directory, many task attempts per
file (the committer's format, not Hadoop's):

    {"version": 2, "jobId": "...",
     "paths": ["<taskAttemptId>/<path below its directory>", ...],
     "sizes": [<size>, ...], "identities": ["<identity>", ...]}

The three lists are columns: the i-th source is ``paths[i]``, below the job attempt's tasks
directory. Version 1 (one file per task attempt, ``{"taskAttemptID": ..., "files": [[path
below the task attempt directory, size, identity], ...]}``) is still read, as the same paths.

One reader, :meth:`SourceIdentities.loads`, raises a :class:`FormatError` naming the file.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from manifest_schema.errors import FormatError
from manifest_schema.records import build, json_object

IDENTITIES_VERSION = 2
_VERSION_1 = 1


@dataclass(frozen=True)
class SourceIdentities:
    """Source files of a job's task attempts, as columns: ``paths[i]`` (below the tasks
    directory, starting with its task attempt id) has ``sizes[i]`` bytes and identity
    ``identities[i]``."""

    job_id: str
    paths: list[str]
    sizes: list[int]
    identities: list[str]

    WHAT = "source identity record"

    @property
    def files(self) -> dict[str, tuple[int, str]]:
        """``path -> (size, identity)``."""
        return dict(zip(self.paths, zip(self.sizes, self.identities, strict=True), strict=True))

    def to_json(self) -> dict[str, Any]:
        return {"version": IDENTITIES_VERSION, "jobId": self.job_id, "paths": self.paths,
                "sizes": self.sizes, "identities": self.identities}

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> SourceIdentities:
        doc = json_object(data, source, cls.WHAT)
        version = doc.get("version")
        if version not in (_VERSION_1, IDENTITIES_VERSION):
            raise FormatError(source, "version", f"unsupported {cls.WHAT} version {version!r}")

        def make() -> SourceIdentities:
            if version == _VERSION_1:
                attempt = str(doc["taskAttemptID"])
                paths, sizes, idents = [], [], []
                for rel, size, ident in doc["files"]:
                    paths.append(f"{attempt}/{rel}" if isinstance(rel, str) else rel)
                    sizes.append(size)
                    idents.append(ident)
            else:
                paths, sizes, idents = doc["paths"], doc["sizes"], doc["identities"]
            if not (isinstance(paths, list) and isinstance(sizes, list)
                    and isinstance(idents, list)) or not len(paths) == len(sizes) == len(idents):
                raise ValueError("paths, sizes and identities must be lists of one length")
            for rel, size, ident in zip(paths, sizes, idents, strict=True):
                if not isinstance(rel, str) or not isinstance(ident, str) \
                        or not isinstance(size, int) or isinstance(size, bool) or size < 0:
                    raise ValueError(f"bad file entry {[rel, size, ident]!r}")
            return cls(str(doc["jobId"]), paths, sizes, idents)

        return build(source, cls.WHAT, make)
