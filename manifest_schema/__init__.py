"""Wire formats of the manifest committer: task manifests, ``_SUCCESS``, IOStatistics.

Each format is a JSON Schema document (``schemas/``) and a typed, frozen Python model with
``loads``/``dumps``; errors are :class:`FormatError` naming the file, the field and the reason.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from manifest_schema.errors import FormatError, ManifestCommitterError
from manifest_schema.iostatistics import IOStatisticsSnapshot, MeanStatistic
from manifest_schema.success_data import COMMITTER_NAME, SUCCESS_DATA_NAME, SuccessData
from manifest_schema.task_manifest import (
    TASK_MANIFEST_TYPE,
    TASK_MANIFEST_VERSION,
    DirEntry,
    DirStatus,
    FileEntry,
    TaskManifest,
    iter_dir_entries,
    iter_file_entries,
    parse_document,
)

__all__ = [
    "COMMITTER_NAME",
    "SUCCESS_DATA_NAME",
    "TASK_MANIFEST_TYPE",
    "TASK_MANIFEST_VERSION",
    "DirEntry",
    "DirStatus",
    "FileEntry",
    "FormatError",
    "IOStatisticsSnapshot",
    "ManifestCommitterError",
    "MeanStatistic",
    "SuccessData",
    "TaskManifest",
    "iter_dir_entries",
    "iter_file_entries",
    "json_schema",
    "parse_document",
]


@cache
def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema document ``task-manifest`` or ``success-data``."""
    text = resources.files("manifest_schema").joinpath(f"schemas/{name}.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema
