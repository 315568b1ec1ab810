"""The JSON Schema documents agree with the models: ours and Hadoop's validate, bad ones don't."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from referencing import Registry, Resource

from manifest_schema import (
    DirEntry,
    DirStatus,
    FileEntry,
    IOStatisticsSnapshot,
    MeanStatistic,
    SuccessData,
    TaskManifest,
    json_schema,
)


def _validator(name: str) -> jsonschema.protocols.Validator:
    resources = []
    for other in ("task-manifest", "success-data", "iostatistics"):
        schema = json_schema(other)
        resources.append((schema["$id"], Resource.from_contents(schema)))
    registry: Registry[Any] = Registry().with_resources(resources)
    schema = json_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema, registry=registry)
    return validator


def _manifest() -> TaskManifest:
    return TaskManifest(
        job_id="job_1", job_attempt_number=0, task_id="task_job_1_m_000000",
        task_attempt_id="attempt_job_1_m_000000_0",
        task_attempt_dir="file:/d/_temporary/manifest_job_1/00/tasks/attempt_job_1_m_000000_0",
        files=(FileEntry("file:/d/_temporary/x/a%20b.csv", "file:/d/a%20b.csv", 3, "etag"),
               FileEntry("file:/d/_temporary/x/c.csv", "file:/d/p=1/c.csv", 0)),
        directories=(DirEntry("file:/d/p=1", DirStatus.NOT_FOUND, 1),),
        iostatistics=IOStatisticsSnapshot({"op_rename": 2}, {}, {"op_rename.min": 1},
                                          {"op_rename.max": 4},
                                          {"op_rename.mean": MeanStatistic(2, 5)}),
        extra_data={"k": "v"},
    )


def test_our_task_manifest_validates() -> None:
    _validator("task-manifest").validate(orjson.loads(_manifest().dumps()))


def test_our_success_data_validates() -> None:
    success = SuccessData(job_id="job_1", success=True, timestamp=1, date="d", hostname="h",
                          metrics={"committer_bytes_committed": 3},
                          diagnostics={"stage": "x"}, filenames=("file:/d/a",))
    _validator("success-data").validate(orjson.loads(success.dumps()))


@pytest.mark.parametrize("n", [0, 1, 2])
def test_hadoop_task_manifests_validate(hadoop_fixtures: Path, n: int) -> None:
    path = hadoop_fixtures / f"task_20240101000000_0001_m_00000{n}-manifest.json"
    _validator("task-manifest").validate(orjson.loads(path.read_bytes()))


@pytest.mark.parametrize("name", ["_SUCCESS", "summary-3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.json"])
def test_hadoop_success_data_validates(hadoop_fixtures: Path, name: str) -> None:
    _validator("success-data").validate(orjson.loads((hadoop_fixtures / name).read_bytes()))


BAD_MANIFEST_CHANGES: dict[str, tuple[str, Any]] = {
    "wrong type": ("type", "SuccessData/1"),
    "wrong version": ("version", 2),
    "version as string": ("version", "1"),
    "jobId a number": ("jobId", 7),
    "empty taskID": ("taskID", ""),
    "negative attempt": ("jobAttemptNumber", -1),
    "files an object": ("files", {}),
    "negative size": ("files", [{"s": "file:/a", "d": "file:/b", "z": -1}]),
    "size a string": ("files", [{"s": "file:/a", "d": "file:/b", "z": "1"}]),
    "file without destination": ("files", [{"s": "file:/a", "z": 1}]),
    "unknown status": ("directories", [{"d": "file:/b", "t": 7, "l": 1}]),
    "extraData not strings": ("extraData", {"k": 1}),
    "counters not integers": ("iostatistics", {"counters": {"x": "1"}}),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFEST_CHANGES))
def test_bad_task_manifests_do_not_validate(case: str) -> None:
    key, value = BAD_MANIFEST_CHANGES[case]
    doc = orjson.loads(_manifest().dumps())
    doc[key] = value
    with pytest.raises(jsonschema.ValidationError):
        _validator("task-manifest").validate(doc)


@pytest.mark.parametrize("key", ["type", "version", "jobId", "taskID", "taskAttemptID"])
def test_task_manifest_required_keys(key: str) -> None:
    doc = orjson.loads(_manifest().dumps())
    del doc[key]
    with pytest.raises(jsonschema.ValidationError):
        _validator("task-manifest").validate(doc)


@pytest.mark.parametrize("change", [
    {"name": "TaskManifest/1"}, {"success": "true"}, {"timestamp": "now"},
    {"metrics": {"x": "1"}}, {"filenames": "a"}, {"diagnostics": {"x": 1}},
])
def test_bad_success_data_does_not_validate(change: dict[str, Any]) -> None:
    doc = orjson.loads(SuccessData(job_id="j", success=True, timestamp=1, date="", hostname=""
                                   ).dumps())
    doc.update(change)
    with pytest.raises(jsonschema.ValidationError):
        _validator("success-data").validate(doc)


def test_unknown_fields_are_allowed_as_hadoop_ignores_them() -> None:
    doc = orjson.loads(_manifest().dumps())
    doc["somethingNew"] = {"any": ["thing"]}
    _validator("task-manifest").validate(doc)
    assert TaskManifest.loads(orjson.dumps(doc)) == _manifest()
