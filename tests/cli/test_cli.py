"""Every subcommand through the real console script, on local disk."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from committer.layout import JobLayout
from tests.cli.conftest import HADOOP, check_golden, run, tree_state
from tests.cli.jobs import age, standard_tasks, write_job, write_task

SUBCOMMANDS = ("inspect", "validate", "status", "commit-job", "abort-job", "cleanup", "diff")


def _job(tmp: Path, job_id: str = "job1") -> JobLayout:
    return write_job(tmp / "dest", job_id, standard_tasks())


# -- help and usage --

@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_explains_itself(command: str) -> None:
    r = run(command, "--help")
    assert r.code == 0, r.err
    assert "exit status" in r.out.lower()
    for option in ("--json", "--storage-option", "--conf", "--debug"):
        assert option in r.out


def test_usage_errors_exit_2() -> None:
    assert run().code == 2
    assert run("no-such-command").code == 2
    r = run("commit-job", "/tmp")  # --job-id missing
    assert r.code == 2 and "--job-id" in r.err


# -- inspect --

def test_inspect_job_attempt_directory(tmp: Path) -> None:
    layout = _job(tmp)
    r = run("inspect", layout.attempt_dir, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["kind"], doc["tasks"], doc["files"], doc["bytes"]) == (
        "job-attempt-directory", 3, 5, 2115)
    assert doc["largest_tasks"][0]["task_id"] == "task_job1_m_000001"
    check_golden("inspect-job-attempt", doc, tmp)
    # Human form names what it found and the totals.
    human = run("inspect", layout.attempt_dir)
    assert human.code == 0
    assert "Job attempt directory" in human.out and "2,115" in human.out
    # The job directory resolves to its latest attempt.
    assert run("inspect", layout.job_dir, "--json").json()["path"] == layout.attempt_dir


def test_inspect_one_manifest(tmp: Path) -> None:
    layout = _job(tmp)
    r = run("inspect", layout.manifest_path("task_job1_m_000000"), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["kind"] == "task-manifest" and doc["files"] == 2
    assert doc["destination"] == str(tmp / "dest")
    check_golden("inspect-manifest", doc, tmp)


def test_inspect_files_is_paged(tmp: Path) -> None:
    layout = _job(tmp)
    r = run("inspect", layout.attempt_dir, "--files", "--offset", "1", "--limit", "2", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["shown"], doc["total"], len(doc["files"])) == (2, 5, 2)
    check_golden("inspect-files-page", doc, tmp)
    everything = run("inspect", layout.attempt_dir, "--files", "--limit", "0", "--json").json()
    assert [f["size"] for f in everything["files"]] == [100, 10, 2000, 0, 5]
    assert everything["files"][1:3] == doc["files"]
    human = run("inspect", layout.attempt_dir, "--files", "--limit", "2")
    assert "Files 1-2 of 5" in human.out and "more: --offset 2 --limit 2" in human.out


def test_inspect_destination_and_success(tmp: Path) -> None:
    layout = _job(tmp)
    assert run("commit-job", layout.dest, "--job-id", "job1").code == 0
    r = run("inspect", layout.success_marker, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["kind"], doc["job_id"], doc["files"], doc["bytes"]) == ("success", "job1", 5, 2115)
    # The job's operation counts belong to the engine's implementation, not to this format.
    check_golden("inspect-success", {k: v for k, v in doc.items() if k != "iostatistics"}, tmp)
    dest = run("inspect", layout.dest, "--json").json()
    assert dest["kind"] == "destination-directory"
    assert dest["last_committed"]["job_id"] == "job1"


# -- validate --

def test_validate_clean_job(tmp: Path) -> None:
    layout = _job(tmp)
    r = run("validate", layout.attempt_dir, "--json")
    assert r.code == 0, r.out
    doc = r.json()
    assert doc["ok"] and doc["checked"][0]["check_store"] == "sources"
    check_golden("validate-clean", doc, tmp)
    human = run("validate", layout.attempt_dir)
    assert human.code == 0 and human.out == "" and "no problems" in human.err


def _tamper(layout: JobLayout, task_id: str, change: dict[str, object]) -> None:
    path = Path(layout.manifest_path(task_id))
    doc = orjson.loads(path.read_bytes())
    for i, value in change.items():
        doc["files"][int(i)].update(value)
    path.write_bytes(orjson.dumps(doc))


def test_validate_reports_each_problem_on_its_own_line(tmp: Path) -> None:
    layout = _job(tmp)
    dest_uri0 = orjson.loads(Path(layout.manifest_path("task_job1_m_000000")).read_bytes())[
        "files"][0]["d"]
    # task 1 claims task 0's destination; task 2 writes outside the destination and lies about
    # a size; one of task 0's sources disappears.
    _tamper(layout, "task_job1_m_000001", {"0": {"d": dest_uri0}})
    _tamper(layout, "task_job1_m_000002", {"0": {"d": "file:/etc/passwd"}, "1": {"z": 6}})
    os.unlink(Path(layout.task_attempt_dir("attempt_job1_m_000000_0")) / "year=2025" /
              "part-00000.csv")
    r = run("validate", layout.attempt_dir)
    assert r.code == 1
    lines = r.out.splitlines()
    assert len(lines) == 4, lines
    assert all(": " in line and "-manifest.json" in line.split(": ")[0] for line in lines)
    text = "\n".join(lines)
    # the load stage's wording: one line per destination, naming every task that claims it
    assert "is claimed by more than one task: task_job1_m_000000, task_job1_m_000001" in text
    assert "outside the destination directory" in text
    assert "is missing from the store" in text
    assert "is 5 bytes in the store, the manifest says 6" in text
    assert "4 problem(s)" in r.err
    doc = run("validate", layout.attempt_dir, "--json")
    assert doc.code == 1
    check_golden("validate-problems", doc.json(), tmp)


def test_validate_schema_problem_in_a_manifest_is_exit_1(tmp: Path) -> None:
    layout = _job(tmp)
    path = Path(layout.manifest_path("task_job1_m_000002"))
    doc = orjson.loads(path.read_bytes())
    doc["files"][0]["z"] = -1
    doc["jobId"] = "other"
    path.write_bytes(orjson.dumps(doc))
    r = run("validate", str(path))
    assert r.code == 1
    assert "size must be an integer >= 0" in r.out
    r = run("validate", layout.attempt_dir)
    assert r.code == 1 and "jobId is 'other', not this job (job1)" in r.out


def test_validate_hadoop_documents() -> None:
    for path in (HADOOP, HADOOP / "_SUCCESS",
                 HADOOP / "summary-3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.json",
                 HADOOP / "task_20240101000000_0001_m_000001-manifest.json"):
        r = run("validate", str(path))
        assert r.code == 0, (path, r.out, r.err)
    r = run("validate", str(HADOOP), "--json")
    check_golden("validate-hadoop", r.json(), None)


# -- Hadoop's own files --

def test_inspect_reads_hadoop_manifests_success_and_summary() -> None:
    manifests = run("inspect", str(HADOOP), "--json")
    assert manifests.code == 0, manifests.err
    doc = manifests.json()
    assert (doc["kind"], doc["tasks"], doc["files"], doc["bytes"]) == (
        "manifest-directory", 3, 4, 20)
    assert doc["destination"] == "/tmp/manifest-committer-fixtures/dest dir ü #%/table"
    check_golden("inspect-hadoop-manifests", doc, None)
    success = run("inspect", str(HADOOP / "_SUCCESS"), "--json").json()
    assert success["committer"].endswith("ManifestCommitter") and success["files"] == 4
    check_golden("inspect-hadoop-success", success, None)
    summary = run("inspect", str(HADOOP / "summary-3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.json"),
                  "--json").json()
    assert summary["kind"] == "summary-report"
    r = run("diff", str(HADOOP / "_SUCCESS"),
            str(HADOOP / "summary-3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.json"))
    assert r.code == 0, r.out


def test_commit_job_of_a_hadoop_layout(tmp: Path) -> None:
    """Hadoop's committer names the job directory without 'manifest_': commit it anyway."""
    layout = _job(tmp, "hjob")
    hadoop = layout.with_hadoop_naming()
    os.rename(layout.job_dir, hadoop.job_dir)
    for m in Path(hadoop.manifests_dir).iterdir():
        m.write_bytes(m.read_bytes().replace(b"/manifest_hjob/", b"/hjob/"))
    assert run("inspect", hadoop.attempt_dir, "--json").json()["layout"] == "hadoop"
    assert run("validate", hadoop.attempt_dir).code == 0
    r = run("commit-job", layout.dest, "--job-id", "hjob", "--json")
    assert r.code == 0, r.err
    assert r.json()["layout"] == "hadoop" and r.json()["files"] == 5


# -- status, commit-job, abort-job, cleanup --

def test_status_classifies_jobs(tmp: Path) -> None:
    dest = tmp / "dest"
    write_job(dest, "done", standard_tasks()[:1])
    assert run("commit-job", str(dest), "--job-id", "done", "--conf",
               "mapreduce.fileoutputcommitter.cleanup.skipped=true").code == 0
    write_job(dest, "running", standard_tasks())
    write_job(dest, "abandoned", standard_tasks()[1:2])
    age(dest / "_temporary" / "manifest_abandoned", 3 * 86400)
    (dest / "_temporary" / "0").mkdir()  # FileOutputCommitter's: not ours to judge
    r = run("status", str(dest), "--json", "--bytes")
    assert r.code == 0, r.err
    doc = r.json()
    states = {j["name"]: j["state"] for j in doc["jobs"]}
    assert states == {"manifest_done": "committed-not-cleaned", "manifest_running": "in-progress",
                      "manifest_abandoned": "stale", "0": "unknown"}
    assert doc["last_committed"]["job_id"] == "done"
    check_golden("status", doc, tmp)
    human = run("status", str(dest))
    assert "committed-not-cleaned" in human.out and "Last committed job" in human.out


def test_commit_job_moves_files_and_writes_success(tmp: Path) -> None:
    layout = _job(tmp)
    r = run("commit-job", layout.dest, "--job-id", "job1", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["files"], doc["bytes"], doc["tasks"]) == (5, 2115, 3)
    assert (Path(layout.dest) / "p=a b%3Ac" / "part-00002.csv").exists()
    assert (Path(layout.dest) / "year=2024" / "part-00001.csv").read_bytes() == b"c" * 2000
    assert not Path(layout.temporary_dir).exists()
    # The job's operation counts belong to the engine's implementation, not to this format.
    del doc["summary"]["iostatistics"]
    check_golden("commit-job", doc, tmp)


def test_commit_job_refuses_bad_manifests_and_moves_nothing(tmp: Path) -> None:
    layout = _job(tmp)
    _tamper(layout, "task_job1_m_000001", {"0": {"d": "file:/etc/passwd"}})
    before = tree_state(tmp)
    r = run("commit-job", layout.dest, "--job-id", "job1")
    assert r.code == 1
    assert "no file was moved" in r.err and len(r.err.splitlines()) == 1
    assert "outside the destination directory" in r.out
    assert tree_state(tmp) == before


def test_abort_job_removes_only_that_job(tmp: Path) -> None:
    layout = _job(tmp)
    other = _job(tmp, "other")
    r = run("abort-job", layout.dest, "--job-id", "job1", "--json")
    assert r.code == 0, r.err
    check_golden("abort-job", r.json(), tmp)
    assert not Path(layout.job_dir).exists() and Path(other.job_dir).exists()
    again = run("abort-job", layout.dest, "--job-id", "job1")
    assert again.code == 2 and "no job job1" in again.err


def test_cleanup_removes_only_stale_jobs(tmp: Path) -> None:
    dest = tmp / "dest"
    write_job(dest, "fresh", standard_tasks()[:1])
    stale = write_job(dest, "old", standard_tasks())
    age(Path(stale.job_dir), 2 * 86400)
    before = tree_state(tmp)
    dry = run("cleanup", str(dest), "--older-than", "1d", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    assert tree_state(tmp) == before
    check_golden("cleanup-dry-run", dry.json(), tmp)
    r = run("cleanup", str(dest), "--older-than", "1d")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0].startswith(f"removed {stale.job_dir} (job old, stale")
    assert not Path(stale.job_dir).exists()
    assert (dest / "_temporary" / "manifest_fresh").exists()
    nothing = run("cleanup", str(dest), "--older-than", "1d")
    assert nothing.code == 0 and nothing.out.startswith("nothing to remove")
    assert run("cleanup", str(dest), "--older-than", "soon").code == 2


# -- diff --

def test_diff_of_two_jobs(tmp: Path) -> None:
    a = write_job(tmp / "a", "job1", standard_tasks())
    tasks = standard_tasks()
    tasks[0]["year=2024/part-00000.csv"] = b"x" * 7  # changed in size
    del tasks[2]["year=2025/part-00002.csv"]  # removed
    tasks[1]["year=2026/part-00001.csv"] = b"new"  # added
    b = write_job(tmp / "b", "job2", tasks)
    r = run("diff", a.attempt_dir, b.attempt_dir, "--json")
    assert r.code == 1, r.err
    doc = r.json()
    assert (doc["added"]["count"], doc["removed"]["count"], doc["changed"]["count"]) == (1, 1, 1)
    check_golden("diff-jobs", doc, tmp)
    same = run("diff", a.attempt_dir, a.attempt_dir)
    assert same.code == 0 and "added 0, removed 0, changed in size 0" in same.out
    mixed = run("diff", a.attempt_dir, str(HADOOP / "_SUCCESS"))
    assert mixed.code == 2


# -- bad input --

def _bad_inputs(tmp: Path) -> dict[str, Path]:
    layout = _job(tmp)
    good = Path(layout.manifest_path("task_job1_m_000000"))
    truncated = tmp / "truncated-manifest.json"
    truncated.write_bytes(good.read_bytes()[:120])
    other = tmp / "data.parquet"
    other.write_bytes(b"PAR1\x00\x01binary")
    other_json = tmp / "package.json"
    other_json.write_text(json.dumps({"name": "x", "version": "1.0"}))
    no_job = tmp / "just a directory"
    (no_job / "sub").mkdir(parents=True)
    (no_job / "notes.txt").write_text("hello")
    return {"truncated": truncated, "other-format": other, "other-json": other_json,
            "no-job": no_job, "missing": tmp / "does not exist"}


@pytest.mark.parametrize("kind", ["truncated", "other-format", "other-json", "no-job", "missing"])
@pytest.mark.parametrize("command", ["inspect", "validate", "diff", "inspect-files"])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(tmp: Path, kind: str,
                                                          command: str) -> None:
    path = str(_bad_inputs(tmp)[kind])
    before = tree_state(tmp)
    args = {"inspect": ["inspect", path], "validate": ["validate", path],
            "diff": ["diff", path, path], "inspect-files": ["inspect", path, "--files"]}[command]
    r = run(*args)
    assert r.code == 2, (r.out, r.err)
    assert len(r.err.splitlines()) == 1 and r.err.startswith("manifest-committer: error: ")
    assert "Traceback" not in r.err and r.out == ""
    assert tree_state(tmp) == before


@pytest.mark.parametrize("command", ["status", "cleanup", "commit-job", "abort-job"])
def test_destination_commands_on_bad_input(tmp: Path, command: str) -> None:
    inputs = _bad_inputs(tmp)
    before = tree_state(tmp)
    for kind in ("missing", "other-format"):
        args = [command, str(inputs[kind])]
        if command in ("commit-job", "abort-job"):
            args += ["--job-id", "job1"]
        r = run(*args)
        assert r.code == 2, (kind, r.out, r.err)
        assert len(r.err.splitlines()) == 1 and "Traceback" not in r.err
    # A destination without that job: exit 2, nothing touched.
    no_job = run(command, str(inputs["no-job"]), *(["--job-id", "job1"] if command in (
        "commit-job", "abort-job") else []))
    assert no_job.code in ((2,) if command in ("commit-job", "abort-job") else (0,))
    assert tree_state(tmp) == before


def test_debug_shows_the_traceback(tmp: Path) -> None:
    r = run("inspect", str(tmp / "missing"), "--debug")
    assert r.code == 2 and "Traceback" in r.err


def test_unknown_storage_scheme_is_a_one_line_error() -> None:
    r = run("inspect", "nosuchscheme://bucket/x")
    assert r.code == 2 and len(r.err.splitlines()) == 1


def test_copied_manifests_validate_against_destinations(tmp: Path) -> None:
    """A diagnostics copy of a committed job's manifests checks the committed output."""
    layout = _job(tmp)
    copy = tmp / "diagnostics"
    shutil.copytree(layout.manifests_dir, copy)
    assert run("commit-job", layout.dest, "--job-id", "job1").code == 0
    r = run("validate", str(copy), "--check-store", "destinations")
    assert r.code == 0, r.out
    (Path(layout.dest) / "year=2024" / "part-00001.csv").write_bytes(b"short")
    r = run("validate", str(copy), "--check-store", "destinations")
    assert r.code == 1
    assert "is 5 bytes in the store, the manifest says 2000" in r.out


def test_second_task_attempt_shows_in_inspect(tmp: Path) -> None:
    layout = _job(tmp)
    write_task(tmp / "dest", "job1", 1, {"year=2024/part-00001.csv": b"retry"})
    doc = run("inspect", layout.attempt_dir, "--json").json()
    assert doc["tasks"] == 3 and doc["bytes"] == 2115 - 2000 + 5
