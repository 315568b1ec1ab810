"""``_SUCCESS``: the job summary, compatible with Hadoop's ``SuccessData/1``.

Hadoop's S3A and manifest committers write the same document; tools that read one read the
other. This committer fills ``committer`` with its own name and adds its metrics, diagnostics
and IOStatistics. Only the first ``filenames`` (100 by default) destinations are recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from manifest_schema.errors import FormatError
from manifest_schema.iostatistics import IOStatisticsSnapshot

SUCCESS_DATA_NAME = "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
COMMITTER_NAME = "spark-manifest-committer"


@dataclass(frozen=True)
class SuccessData:
    job_id: str
    success: bool
    timestamp: int  # milliseconds since the epoch
    date: str
    hostname: str
    committer: str = COMMITTER_NAME
    description: str = ""
    job_id_source: str = ""
    metrics: Mapping[str, int] = field(default_factory=dict)
    diagnostics: Mapping[str, str] = field(default_factory=dict)
    filenames: tuple[str, ...] = ()
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    state: str = ""
    stage: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": SUCCESS_DATA_NAME,
            "timestamp": self.timestamp,
            "date": self.date,
            "hostname": self.hostname,
            "committer": self.committer,
            "description": self.description,
            "jobId": self.job_id,
            "jobIdSource": self.job_id_source,
            "metrics": dict(sorted(self.metrics.items())),
            "diagnostics": dict(sorted(self.diagnostics.items())),
            "filenames": list(self.filenames),
            "iostatistics": self.iostatistics.to_json(),
            "success": self.success,
            "state": self.state,
            "stage": self.stage,
        }

    def dumps(self) -> bytes:
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2)

    @classmethod
    def loads(cls, data: bytes, source: str = "<memory>") -> SuccessData:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            reason = "is empty (a classic zero-byte _SUCCESS marker?)" if not data.strip() \
                else f"is not valid JSON ({e})"
            raise FormatError(source, "", reason) from None
        if not isinstance(doc, dict):
            raise FormatError(source, "", "is not a JSON object")
        name = doc.get("name")
        if name != SUCCESS_DATA_NAME:
            raise FormatError(source, "name", f"is {name!r}, not {SUCCESS_DATA_NAME}")

        def text(key: str) -> str:
            v = doc.get(key)
            if v is None:
                return ""
            if not isinstance(v, str):
                raise FormatError(source, key, "must be a string")
            return v

        metrics = doc.get("metrics") or {}
        if not isinstance(metrics, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in metrics.values()
        ):
            raise FormatError(source, "metrics", "must be an object of integers")
        diagnostics = doc.get("diagnostics") or {}
        if not isinstance(diagnostics, dict) or not all(
            isinstance(v, str) for v in diagnostics.values()
        ):
            raise FormatError(source, "diagnostics", "must be an object of strings")
        filenames = doc.get("filenames") or []
        if not isinstance(filenames, list) or not all(isinstance(v, str) for v in filenames):
            raise FormatError(source, "filenames", "must be an array of strings")
        ts = doc.get("timestamp", 0)
        if not isinstance(ts, int) or isinstance(ts, bool):
            raise FormatError(source, "timestamp", "must be an integer (milliseconds)")
        success = doc.get("success", False)
        if not isinstance(success, bool):
            raise FormatError(source, "success", "must be true or false")
        return cls(
            job_id=text("jobId"),
            success=success,
            timestamp=ts,
            date=text("date"),
            hostname=text("hostname"),
            committer=text("committer"),
            description=text("description"),
            job_id_source=text("jobIdSource"),
            metrics=metrics,
            diagnostics=diagnostics,
            filenames=tuple(filenames),
            iostatistics=IOStatisticsSnapshot.from_json(doc.get("iostatistics"), source),
            state=text("state"),
            stage=text("stage"),
        )
