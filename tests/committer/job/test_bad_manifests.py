"""A corpus of bad manifests: each one gives a clear error and moves or deletes nothing.

The job has two committed tasks. Task 0's manifest is always good; task 1's is replaced by one
bad variant per case. If job commit checked manifests lazily, task 0's files would already be
moving when task 1's problem surfaced: so the whole directory tree (destination, job directory,
sources, the file "elsewhere") is compared byte for byte before and after the failed commit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from committer import task_ids
from committer.errors import FormatError, UntrustedManifestError
from manifest_schema import SUCCESS_DATA_NAME
from manifest_schema.uris import location_to_uri
from tests.committer.helpers import JOB_ID, fast_config, new_job, task_attempt, tree

MAX_BYTES = 32 * 1024


@dataclass
class Ctx:
    root: Path
    dest: Path
    manifest0: Path
    manifest1: Path
    good1: bytes
    other_attempt_file: str  # URI of a file in task 1's *uncommitted* attempt directory
    own_dir_uri: str  # task 1 attempt 0's directory, as a URI

    @property
    def dest_uri(self) -> str:
        return location_to_uri(str(self.dest))

    def doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(self.good1)
        return doc

    def write(self, doc: Any) -> None:
        self.manifest1.write_bytes(orjson.dumps(doc))


Mutation = Callable[[Ctx], None]


def _edit(change: Callable[[dict[str, Any], Ctx], None]) -> Mutation:
    def mutate(ctx: Ctx) -> None:
        doc = ctx.doc()
        change(doc, ctx)
        ctx.write(doc)

    return mutate


def _raw(data: Callable[[Ctx], bytes]) -> Mutation:
    def mutate(ctx: Ctx) -> None:
        ctx.manifest1.write_bytes(data(ctx))

    return mutate


def _set_file(key: str, value: Callable[[Ctx], Any]) -> Mutation:
    def change(doc: dict[str, Any], ctx: Ctx) -> None:
        doc["files"][0][key] = value(ctx)

    return _edit(change)


def _set(key: str, value: Any) -> Mutation:
    def change(doc: dict[str, Any], _ctx: Ctx) -> None:
        if value is _DELETE:
            del doc[key]
        else:
            doc[key] = value

    return _edit(change)


_DELETE = object()
T1 = task_ids(JOB_ID, 1, 0)
T0 = task_ids(JOB_ID, 0, 0)


def _duplicate_within(doc: dict[str, Any], _ctx: Ctx) -> None:
    doc["files"].append(copy.deepcopy(doc["files"][0]))


def _duplicate_across(doc: dict[str, Any], ctx: Ctx) -> None:
    doc["files"][0]["d"] = ctx.dest_uri + "/b.csv"  # task 0 writes b.csv


def _other_attempt(doc: dict[str, Any], ctx: Ctx) -> None:
    other = task_ids(JOB_ID, 1, 1)[1]
    doc["taskAttemptID"] = other
    doc["files"] = [{"s": ctx.other_attempt_file, "d": ctx.dest_uri + "/p=2/c.csv", "z": 5}]


def _hostile_directory(doc: dict[str, Any], ctx: Ctx) -> None:
    doc["directories"].append({"d": location_to_uri(str(ctx.root / "elsewhere")), "t": 1,
                               "l": 1})


def _huge(ctx: Ctx) -> None:
    doc = ctx.doc()
    doc["extraData"] = {"padding": "x" * (2 * MAX_BYTES)}
    ctx.write(doc)


CASES: dict[str, tuple[Mutation, str]] = {
    "truncated": (_raw(lambda c: c.good1[: len(c.good1) // 2]), "not valid JSON"),
    "empty": (_raw(lambda c: b""), "is empty"),
    "whitespace only": (_raw(lambda c: b"  \n"), "is empty"),
    "not JSON": (_raw(lambda c: b"PAR1 this is parquet"), "not valid JSON"),
    "JSON array": (_raw(lambda c: b"[{\"type\": 1}]"), "not a JSON object"),
    "JSON string": (_raw(lambda c: b"\"manifest\""), "not a JSON object"),
    "wrong type": (_set("type", SUCCESS_DATA_NAME), "'type'"),
    "missing type": (_set("type", _DELETE), "'type'"),
    "wrong version": (_set("version", 2), "only version 1"),
    "version as bool": (_set("version", True), "only version 1"),
    "version as string": (_set("version", "1"), "only version 1"),
    "missing jobId": (_set("jobId", _DELETE), "'jobId' is missing"),
    "missing taskID": (_set("taskID", _DELETE), "'taskID' is missing"),
    "missing taskAttemptID": (_set("taskAttemptID", _DELETE), "'taskAttemptID' is missing"),
    "empty jobId": (_set("jobId", ""), "'jobId' must be a non-empty string"),
    "files not an array": (_set("files", {"s": "x"}), "'files' must be an array"),
    "negative size": (_set_file("z", lambda c: -1), "size must be an integer >= 0"),
    "size as string": (_set_file("z", lambda c: "5"), "size must be an integer >= 0"),
    "size as bool": (_set_file("z", lambda c: True), "size must be an integer >= 0"),
    "size as float": (_set_file("z", lambda c: 5.0), "size must be an integer >= 0"),
    "missing destination": (_set_file("d", lambda c: None), "destination must be"),
    "etag not a string": (_set_file("e", lambda c: 42), "etag must be a string"),
    "dest with .. segments": (
        _set_file("d", lambda c: c.dest_uri + "/p=2/../../escape.csv"), "'..' path segments"),
    "dest with %2e%2e": (
        _set_file("d", lambda c: c.dest_uri + "/%2e%2e/escape.csv"), "'..' path segments"),
    "dest with %2F%2e%2e": (
        _set_file("d", lambda c: c.dest_uri + "/p%2F%2E%2E%2F..%2Fescape.csv"),
        "'..' path segments"),
    "dest absolute elsewhere": (
        _set_file("d", lambda c: location_to_uri(str(c.root / "elsewhere" / "x.csv"))),
        "outside the destination directory"),
    "dest prefix sibling": (
        _set_file("d", lambda c: c.dest_uri + "2/x.csv"), "outside the destination directory"),
    "dest other scheme": (
        _set_file("d", lambda c: "gs://bucket/table/x.csv"), "outside the destination directory"),
    "dest other bucket": (
        _set_file("d", lambda c: "abfs://other@account.dfs.core.windows.net/x.csv"),
        "outside the destination directory"),
    "dest remote file host": (
        _set_file("d", lambda c: "file://remotehost" + c.dest_uri[len("file:"):] + "/x.csv"),
        "remote host"),
    "dest relative": (_set_file("d", lambda c: "x.csv"), "not an absolute path"),
    "dest with a NUL": (_set_file("d", lambda c: c.dest_uri + "/p=1/x\u0000.csv"),
                        "contains a NUL character"),
    "source with a NUL": (_set_file("s", lambda c: c.own_dir_uri + "/x\u0000.csv"),
                          "contains a NUL character"),
    "dest into _temporary": (
        _set_file("d", lambda c: c.dest_uri + "/_temporary/x.csv"), "_temporary"),
    "dest onto _SUCCESS": (_set_file("d", lambda c: c.dest_uri + "/_SUCCESS"), "_SUCCESS"),
    "source in another attempt's dir": (
        _set_file("s", lambda c: c.other_attempt_file), "outside the task attempt directory"),
    "source climbing into another attempt": (
        _set_file("s", lambda c: c.own_dir_uri + "/../" + c.other_attempt_file.rsplit(
            "/tasks/", 1)[1]), "'..' path segments"),
    "source is a destination file": (
        _set_file("s", lambda c: c.dest_uri + "/existing/keep.csv"),
        "outside the task attempt directory"),
    "source elsewhere": (
        _set_file("s", lambda c: location_to_uri(str(c.root / "elsewhere" / "secret.txt"))),
        "outside the task attempt directory"),
    "source other scheme": (
        _set_file("s", lambda c: "gs://bucket/secret.txt"), "outside the task attempt directory"),
    "duplicate within one manifest": (_edit(_duplicate_within), "destination listed twice"),
    "duplicate across two tasks": (_edit(_duplicate_across), "claimed by more than one task"),
    "wrong jobId": (_set("jobId", "job_other"), "not this job"),
    "wrong jobAttemptNumber": (_set("jobAttemptNumber", 1), "not this attempt"),
    "negative jobAttemptNumber": (_set("jobAttemptNumber", -1), "non-negative integer"),
    "taskID not the file's": (_set("taskID", T0[0]), "file is named for"),
    "taskAttemptID climbing": (_set("taskAttemptID", "../manifests"), "not a valid id"),
    "attempt not the committed one": (_edit(_other_attempt), "the committed attempt"),
    "hostile directory entry": (_edit(_hostile_directory), "outside the destination directory"),
    "unknown directory status": (
        _edit(lambda d, c: d["directories"][0].update(t=9)), "unknown directory status"),
    "missing manifest of a committed task": (lambda c: c.manifest1.unlink(), "is missing"),
    "huge manifest": (_huge, f"larger than the limit of {MAX_BYTES} bytes"),
}


@pytest.fixture(autouse=True, params=["read inline", "read ahead"])
def reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of loading: read and checked on the calling thread (local disk), and read
    ahead on the pool (object stores, network filesystems): the same verdicts."""
    from committer.store.local import LocalStore

    waits = request.param == "read ahead"
    monkeypatch.setattr(LocalStore, "reads_wait", lambda self, path: waits)


@pytest.fixture
def ctx(tmp_path: Path) -> Ctx:
    root = tmp_path
    dest = root / "dest dir"
    (dest / "existing").mkdir(parents=True)
    (dest / "existing" / "keep.csv").write_bytes(b"keep me")
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "secret.txt").write_bytes(b"secret")
    cfg = fast_config(manifest_max_bytes=MAX_BYTES)
    new_job(dest, config=cfg)
    t0 = task_attempt(dest, 0, 0, {"p=1/a.csv": b"aaaaa", "b.csv": b"bbbbb"}, config=cfg)
    t0.commit()
    t1 = task_attempt(dest, 1, 0, {"p=2/c.csv": b"ccccc"}, config=cfg)
    t1.commit()
    t1_other = task_attempt(dest, 1, 1, {"p=2/c.csv": b"zzzzz"}, config=cfg)  # never committed
    manifest1 = Path(t1.layout.manifest_path(t1.task_id))
    return Ctx(
        root=root,
        dest=dest,
        manifest0=Path(t0.layout.manifest_path(t0.task_id)),
        manifest1=manifest1,
        good1=manifest1.read_bytes(),
        other_attempt_file=location_to_uri(t1_other.output_path("p=2/c.csv")),
        own_dir_uri=location_to_uri(t1.working_dir),
    )


def test_the_good_corpus_commits(ctx: Ctx) -> None:
    """The baseline every bad case starts from really commits (so the cases prove something)."""
    from committer import JobCommitter

    JobCommitter(str(ctx.dest), JOB_ID, config=fast_config()).commit({T0[0]: T0[1], T1[0]: T1[1]})
    assert (ctx.dest / "p=2" / "c.csv").read_bytes() == b"ccccc"
    assert (ctx.dest / "b.csv").read_bytes() == b"bbbbb"


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_manifest_is_refused_before_anything_moves(ctx: Ctx, case: str) -> None:
    from committer import JobCommitter

    mutate, reason = CASES[case]
    mutate(ctx)
    before = tree(ctx.root)
    job = JobCommitter(str(ctx.dest), JOB_ID, config=fast_config(manifest_max_bytes=MAX_BYTES))
    with pytest.raises((UntrustedManifestError, FormatError)) as info:
        job.commit({T0[0]: T0[1], T1[0]: T1[1]})
    message = str(info.value)
    assert reason in message
    if case == "duplicate across two tasks":
        assert T0[0] in message and T1[0] in message  # names both claimants
    else:
        assert str(ctx.manifest1) in message  # names the file
        assert str(ctx.manifest0) not in message  # and only the bad one
    assert "no file was moved" in message
    # nothing moved, nothing deleted, nothing written: byte for byte the same tree
    assert tree(ctx.root) == before
    # and the job can still be aborted cleanly afterwards
    job.abort()
    assert not (ctx.dest / "_temporary").exists()
    assert (ctx.dest / "existing" / "keep.csv").read_bytes() == b"keep me"
    assert not (ctx.dest / "p=2" / "c.csv").exists()


def test_every_problem_is_listed_at_once(ctx: Ctx) -> None:
    from committer import JobCommitter

    doc = ctx.doc()
    doc["files"] = [
        {"s": ctx.other_attempt_file, "d": ctx.dest_uri + "/one.csv", "z": 1},
        {"s": ctx.own_dir_uri + "/p=2/c.csv", "d": "gs://bucket/two.csv", "z": 1},
        {"s": ctx.own_dir_uri + "/p=2/c.csv", "d": ctx.dest_uri + "/_SUCCESS", "z": 1},
    ]
    ctx.write(doc)
    ctx.manifest0.write_bytes(b"{")
    with pytest.raises(UntrustedManifestError) as info:
        JobCommitter(str(ctx.dest), JOB_ID, config=fast_config()).commit(
            {T0[0]: T0[1], T1[0]: T1[1]})
    assert len(info.value.problems) == 4
    assert any(str(ctx.manifest0) in p for p in info.value.problems)


def _same_source_twice(doc: dict[str, Any], ctx: Ctx) -> None:
    doc["files"].append(dict(doc["files"][0], d=ctx.dest_uri + "/p=2/copy.csv"))


def _spelled_twice(doc: dict[str, Any], ctx: Ctx) -> None:
    again = dict(doc["files"][0])
    again["d"] = "file://" + again["d"][len("file:"):]  # file:/x and file:///x are one file
    doc["files"].append(again)


@pytest.mark.parametrize("change", [_same_source_twice, _spelled_twice])
def test_one_file_claimed_twice_is_refused_before_anything_moves(
    ctx: Ctx, change: Callable[[dict[str, Any], Ctx], None]
) -> None:
    from committer import JobCommitter

    _edit(change)(ctx)
    before = tree(ctx.root)
    with pytest.raises(UntrustedManifestError):
        JobCommitter(str(ctx.dest), JOB_ID, config=fast_config()).commit(
            {T0[0]: T0[1], T1[0]: T1[1]})
    assert tree(ctx.root) == before


def test_directory_entries_naming_the_destination_or_an_extra_root_are_accepted(
    dest: Path, tmp_path: Path
) -> None:
    """A manifest may list the destination itself or a custom partition root as a directory
    (Spark's custom locations): there is nothing to create, and nothing to refuse."""
    from manifest_schema.uris import local_path

    custom = tmp_path / "custom location"
    job = new_job(dest)
    ta = task_attempt(dest, 0, 0, {"p=1/a.csv": b"a"})
    manifest = ta.commit()
    doc = orjson.loads(Path(local_path(ta.layout.manifest_path(ta.task_id))).read_bytes())
    doc["directories"] += [
        {"d": location_to_uri(str(dest)), "t": 0, "l": 0},
        {"d": location_to_uri(str(custom)), "t": 0, "l": 0},
    ]
    Path(local_path(ta.layout.manifest_path(ta.task_id))).write_bytes(orjson.dumps(doc))
    job.commit({manifest.task_id: manifest.task_attempt_id},
               extra_destination_roots=[str(custom)])
    assert (dest / "p=1" / "a.csv").read_bytes() == b"a"
