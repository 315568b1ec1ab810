"""Task manifest and _SUCCESS models: load/dump, Hadoop's documents, precise errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manifest_schema import (
    COMMITTER_NAME,
    TASK_MANIFEST_TYPE,
    DirEntry,
    DirStatus,
    FileEntry,
    FormatError,
    IOStatisticsSnapshot,
    MeanStatistic,
    SuccessData,
    TaskManifest,
    iter_file_entries,
    parse_document,
)

HADOOP_MANIFESTS = [f"task_20240101000000_0001_m_00000{n}-manifest.json" for n in range(3)]


@pytest.mark.parametrize("name", HADOOP_MANIFESTS)
def test_hadoop_manifests_load(hadoop_fixtures: Path, name: str) -> None:
    m = TaskManifest.loads((hadoop_fixtures / name).read_bytes(), name)
    assert m.job_id == "3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f"
    assert m.task_id in name
    assert m.task_attempt_id == m.task_id.replace("task_", "attempt_") + "_0"
    assert all(f.source.startswith("file:///") and f.dest.startswith("file:/") for f in m.files)
    assert all(f.etag is None for f in m.files)
    assert m.iostatistics.counters["task_stage_save_manifest"] == 1
    # and survives our dump/load unchanged
    assert TaskManifest.loads(m.dumps()) == m


def test_hadoop_manifest_details(hadoop_fixtures: Path) -> None:
    m = TaskManifest.loads((hadoop_fixtures / HADOOP_MANIFESTS[2]).read_bytes())
    assert [(d.status, d.level) for d in m.directories] == [
        (DirStatus.NOT_FOUND, 1), (DirStatus.NOT_FOUND, 2)]
    assert m.files[0].size == 0 and m.total_size == 0
    assert m.files[0].dest.endswith("/p=a%20b%253Ac/q=2/part-00002-"
                                    "3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.c000.csv")


@pytest.mark.parametrize("name", ["_SUCCESS", "summary-3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.json"])
def test_hadoop_success_data_loads(hadoop_fixtures: Path, name: str) -> None:
    s = SuccessData.loads((hadoop_fixtures / name).read_bytes(), name)
    assert s.success and s.job_id == "3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f"
    assert s.committer.endswith("ManifestCommitter")
    assert s.iostatistics.counters["committer_bytes_committed"] == 20
    assert len(s.filenames) == 4
    assert SuccessData.loads(s.dumps()) == s


def test_zero_byte_success_marker_is_explained() -> None:
    with pytest.raises(FormatError, match="zero-byte"):
        SuccessData.loads(b"", "/t/_SUCCESS")


def test_success_data_defaults_name_this_committer() -> None:
    s = SuccessData(job_id="j", success=False, timestamp=5, date="d", hostname="h")
    doc = orjson.loads(s.dumps())
    assert doc["committer"] == COMMITTER_NAME
    assert doc["name"] == "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
    assert doc["success"] is False


def test_etag_omitted_when_none() -> None:
    assert "e" not in FileEntry("file:/a", "file:/b", 1).to_json()
    assert FileEntry("file:/a", "file:/b", 1, "x").to_json()["e"] == "x"


def test_format_error_names_file_field_and_reason() -> None:
    doc = {"type": TASK_MANIFEST_TYPE, "version": 1, "jobId": "j", "taskID": "t",
           "taskAttemptID": "a", "files": [{"s": "file:/a", "d": "file:/b", "z": -3}]}
    with pytest.raises(FormatError) as info:
        TaskManifest.loads(orjson.dumps(doc), "/x/t-manifest.json")
    err = info.value
    assert (err.source, err.field) == ("/x/t-manifest.json", "files[0].z")
    assert "-3" in err.reason
    assert str(err).startswith("/x/t-manifest.json:")


def test_streaming_parse_yields_plain_tuples() -> None:
    doc = parse_document(orjson.dumps({
        "type": TASK_MANIFEST_TYPE, "version": 1, "jobId": "j", "taskID": "t",
        "taskAttemptID": "a", "files": [{"s": "file:/a", "d": "file:/b", "z": 2, "e": "t"}],
    }), "m")
    assert list(iter_file_entries(doc, "m")) == [("file:/a", "file:/b", 2, "t")]


def test_iostatistics_merge() -> None:
    a = IOStatisticsSnapshot({"c": 1}, {}, {"m.min": 5}, {"m.max": 5},
                             {"m.mean": MeanStatistic(1, 5)})
    b = IOStatisticsSnapshot({"c": 2, "d": 1}, {}, {"m.min": 3}, {"m.max": 9},
                             {"m.mean": MeanStatistic(2, 12)})
    m = a.merged(b)
    assert m.counters == {"c": 3, "d": 1}
    assert m.minimums == {"m.min": 3} and m.maximums == {"m.max": 9}
    assert m.meanstatistics["m.mean"] == MeanStatistic(3, 17)
    assert m.meanstatistics["m.mean"].mean == pytest.approx(17 / 3)


_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)


@settings(max_examples=100, deadline=None)
@given(
    files=st.lists(st.tuples(_text, st.integers(0, 2**40), st.none() | _text), max_size=5,
                   unique_by=lambda f: f[0]),
    dirs=st.lists(st.tuples(_text, st.sampled_from(list(DirStatus)), st.integers(0, 9)),
                  max_size=3),
    extra=st.dictionaries(_text, _text, max_size=3),
    attempt=st.integers(0, 99),
)
def test_task_manifest_round_trips(
    files: list[tuple[str, int, str | None]], dirs: list[tuple[str, DirStatus, int]],
    extra: dict[str, str], attempt: int,
) -> None:
    m = TaskManifest(
        job_id="j", job_attempt_number=attempt, task_id="t", task_attempt_id="a",
        task_attempt_dir="file:/x",
        files=tuple(FileEntry("file:/s/" + d, "file:/d/" + d, z, e) for d, z, e in files),
        directories=tuple(DirEntry("file:/d/" + d, s, lvl) for d, s, lvl in dirs),
        extra_data=extra,
    )
    assert TaskManifest.loads(m.dumps()) == m
