"""The protocol's directory layout, exactly, and the ids that become path segments."""

from __future__ import annotations

import pytest

from committer.errors import ConfigError
from committer.layout import JobLayout, check_id, join


def test_protocol_layout() -> None:
    lay = JobLayout("/d/table/", "job1", 3)
    assert lay.dest == "/d/table"
    assert lay.temporary_dir == "/d/table/_temporary"
    assert lay.job_dir == "/d/table/_temporary/manifest_job1"
    assert lay.attempt_dir == "/d/table/_temporary/manifest_job1/03"
    assert lay.tasks_dir == "/d/table/_temporary/manifest_job1/03/tasks"
    assert lay.manifests_dir == "/d/table/_temporary/manifest_job1/03/manifests"
    assert lay.task_attempt_dir("attempt_1") == lay.tasks_dir + "/attempt_1"
    assert lay.manifest_path("task_1") == lay.manifests_dir + "/task_1-manifest.json"
    assert lay.temp_manifest_path("attempt_1") == lay.manifests_dir + "/attempt_1-manifest.json.tmp"
    assert lay.success_marker == "/d/table/_SUCCESS"


def test_hadoop_naming_has_no_prefix() -> None:
    lay = JobLayout("gs://b/t", "3f2b8c1e-0d4a", 0).with_hadoop_naming()
    assert lay.job_dir == "gs://b/t/_temporary/3f2b8c1e-0d4a"
    assert lay.attempt_dir == "gs://b/t/_temporary/3f2b8c1e-0d4a/00"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "../x", ".hidden", "a..b", "x y", "a\\b",
                                 "_temporary", "é", "a" * 300])
def test_unsafe_ids_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError):
        check_id("job id", bad)
    with pytest.raises(ConfigError):
        JobLayout("/d", bad)


@pytest.mark.parametrize("good", ["job_1", "3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f", "a.b", "A9"])
def test_safe_ids_pass(good: str) -> None:
    assert check_id("job id", good) == good


@pytest.mark.parametrize("attempt", [-1, 100])
def test_attempt_out_of_range(attempt: int) -> None:
    with pytest.raises(ConfigError):
        JobLayout("/d", "j", attempt)


def test_layout_refuses_unsafe_task_ids() -> None:
    lay = JobLayout("/d", "j")
    with pytest.raises(ConfigError):
        lay.manifest_path("../../x")
    with pytest.raises(ConfigError):
        lay.task_attempt_dir("a/b")


def test_join() -> None:
    assert join("/a/", "b", "/c/") == "/a/b/c"
    assert join("gs://bucket", "x") == "gs://bucket/x"
