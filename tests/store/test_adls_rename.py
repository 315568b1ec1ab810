"""The ADLS Gen2 (hierarchical namespace) path of the Azure backend, against the local stub.

Azurite has no Data Lake endpoint, so these run against ``committer.testing.adls_stub``: one
in-memory account behind a Blob and a DFS endpoint, as the service has. What is checked: the
backend asks the account whether it has a namespace and uses the Data Lake rename exactly
then (one DFS request, atomic, keeping the etag, never replacing), the failures a rename meets
(source missing, destination parent missing, throttling, an answer lost after the rename
happened) end as the managed store promises, and a whole job commit works on such an account.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceModifiedError

from committer import statistics as st
from committer.errors import (
    AmbiguousRenameError,
    PathExistsError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
)
from committer.job import JobCommitter
from committer.store import open_store
from committer.store.azure import AzureStore, open_azure
from committer.store.azure import account as azure_account
from committer.store.azure.auth import SharedKey, azure_auth
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.adls_stub import AdlsStub
from tests.store.stub_fixtures import AdlsTarget, fast_config


def _renames(target: AdlsTarget) -> list[str]:
    """The rename-related requests the account received (DFS renames and Blob copies)."""
    return [op for op in target.stub.ops() if op in ("dfs_rename", "copy_blob")]


# -- choosing the rename ---------------------------------------------------------------------


@pytest.mark.parametrize("hierarchical", [True, False])
def test_namespace_is_asked_of_the_account(hierarchical: bool) -> None:
    with AdlsStub(hierarchical=hierarchical) as stub:
        store = open_azure("abfs://fs", stub.storage_options)
        try:
            assert stub.ops() == [] and store.namespace_source == "unknown"  # opening is free
            assert store.hierarchical is hierarchical
            assert store.namespace_source == "account"
            assert store.rename_keeps_etag is hierarchical
            assert store.flat_walk is not hierarchical
            assert stub.sent() == ["account_info"]  # asked once
        finally:
            store.close()


def test_account_information_refused_means_flat() -> None:
    """A credential that may not read account information (a container SAS: 403): copy +
    delete, which is correct on both kinds of account."""
    with AdlsStub(hierarchical=True, account_info_allowed=False) as stub:
        store = open_azure("abfs://fs", stub.storage_options)
        try:
            assert store.hierarchical is False
            assert store.namespace_source == "refused"
        finally:
            store.close()


def test_transient_failure_of_detection_is_retried_then_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Throttling while asking must not make a namespace account look flat: the question is
    retried, then fails the operation that needed it, which the managed store retries."""
    monkeypatch.setattr(azure_account, "_DETECT_RETRY_DELAY_S", 0.001)
    # no hedged copy of a slow question (a copy would take one of the two refusals: how many
    # questions then fail would be the machine's speed's)
    monkeypatch.setattr("committer.store.http.hedge.EARLY_S", 3600.0)
    with AdlsStub(hierarchical=True) as stub:
        stub.faults.fail("account_info", times=2)
        store = open_azure("abfs://fs", stub.storage_options)
        try:
            assert store.hierarchical is True
            assert stub.sent() == ["account_info"] * 3
        finally:
            store.close()

        stub.faults.fail("account_info", times=100)
        unlucky = open_azure("abfs://fs", stub.storage_options)
        try:
            with pytest.raises(TransientStoreError):
                assert unlucky.hierarchical
            assert unlucky.namespace_source == "unknown"  # not guessed
        finally:
            unlucky.close()

        stub.faults.clear()
        stub.faults.fail("account_info", times=azure_account._DETECT_ATTEMPTS + 1)
        backend = open_azure("abfs://fs", stub.storage_options)
        managed = open_store("abfs://fs", fast_config(stub.storage_options), backend=backend)
        try:
            managed.mkdirs("abfs://fs/dir")  # needs the answer: a namespace makes a directory
            assert managed.stats.counter(st.STORE_IO_THROTTLED) == 1
            assert backend.hierarchical is True
            assert "dfs_create" in stub.ops()
        finally:
            backend.close()


def test_namespace_option_wins_and_takes_text() -> None:
    with AdlsStub(hierarchical=True) as stub:
        store = open_azure("abfs://fs", {**stub.storage_options,
                                         "committer_hierarchical": "false"})
        try:
            assert store.hierarchical is False and store.namespace_source == "option"
            assert stub.ops() == []  # not asked
        finally:
            store.close()


def test_dfs_endpoint_is_the_blob_endpoints_twin_or_the_option() -> None:
    fs = SimpleNamespace(service_client=SimpleNamespace(
        url="https://acct.blob.core.windows.net/?sv=2025-01-01&sig=abc", credential=None))
    store = AzureStore(fs, hierarchical=True)
    assert store.dfs_account_url() == "https://acct.dfs.core.windows.net/?sv=2025-01-01&sig=abc"
    private = AzureStore(fs, hierarchical=True, dfs_url="https://dfs.example/acct")
    assert private.dfs_account_url() == "https://dfs.example/acct?sv=2025-01-01&sig=abc"


def test_the_blob_client_s_account_key_signs_both_endpoints(adls: AdlsTarget) -> None:
    """adlfs's Blob client holds the key as the blob package's policy object; the lean path
    reads the account and key from it and signs Blob and Data Lake requests alike (the Data
    Lake SDK refused that object: "Unsupported credential")."""
    from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

    blob_key = SharedKeyCredentialPolicy("acct", "a2V5")  # type: ignore[no-untyped-call]
    auth = azure_auth(SimpleNamespace(credential=blob_key, url="https://acct.blob.x/"))
    assert isinstance(auth, SharedKey) and auth.account == "acct"
    store = adls.managed()
    # the stub refuses a request without "SharedKey devstoreaccount1:..." (403)
    store.mkdirs(adls.url("d"))  # a Data Lake request
    store.write_bytes(adls.url("d", "f"), b"1")  # a Blob request
    assert "dfs_create" in adls.stub.ops() and "put_blob" in adls.stub.ops()


# -- the Data Lake rename --------------------------------------------------------------------


def test_rename_is_one_data_lake_request_and_keeps_the_etag(adls: AdlsTarget) -> None:
    store = adls.managed()
    src, dst = adls.url("job", "task", "part-0.csv"), adls.url("out", "p=1", "part-0.csv")
    store.write_bytes(src, b"a,b\n1,2\n")
    store.mkdirs(adls.url("out", "p=1"))
    before = store.stat(src)
    assert before.etag is not None
    assert store.identity(before) == before.etag  # the etag proves identity here
    adls.stub.reset_log()

    store.rename_file(src, dst, size=before.size, etag=before.etag)

    assert _renames(adls) == ["dfs_rename"]
    [request] = [r for r in adls.stub.requests if r.op == "dfs_rename"]
    assert request.endpoint == "dfs"
    assert request.headers["x-ms-rename-source"] == f"/{adls.container}/job/task/part-0.csv"
    assert request.headers["If-None-Match"] == "*"  # never replace
    assert request.query["mode"] == "legacy"
    after = store.stat(dst)
    assert (after.etag, after.size, after.checksum) == (before.etag, before.size,
                                                          before.checksum)
    node = adls.stub.node(adls.container, "out/p=1/part-0.csv")
    assert node is not None and node.etag.strip('"') == before.etag
    assert not store.exists(src)
    assert store.exists(adls.url("job", "task"))  # a real directory outlives its file
    assert store.read_bytes(dst) == b"a,b\n1,2\n"


def test_rename_source_with_a_literal_percent_escape_is_sent_encoded_once(
        adls: AdlsTarget) -> None:
    # The Data Lake SDK decodes the rename source before encoding it: "p=a b%3Ac" would reach
    # the service as "p=a b:c" (SourcePathNotFound). The backend compensates; the service
    # decodes the header once, so it must carry "%253A".
    store = adls.managed()
    src = adls.url("job", "task", "p=a b%3Ac", "part-0.csv")
    dst = adls.url("out", "p=a b%3Ac", "part-0.csv")
    store.write_bytes(src, b"x")
    store.mkdirs(adls.url("out", "p=a b%3Ac"))
    adls.stub.reset_log()

    store.rename_file(src, dst, size=1)

    [request] = [r for r in adls.stub.requests if r.op == "dfs_rename"]
    assert "%253Ac" in request.headers["x-ms-rename-source"]
    assert store.read_bytes(dst) == b"x" and not store.exists(src)


def test_flat_account_renames_by_copy_and_delete(adls_flat: AdlsTarget) -> None:
    store = adls_flat.managed()
    src, dst = adls_flat.url("in", "f"), adls_flat.url("out", "f")
    store.write_bytes(src, b"payload")
    before = store.stat(src)
    adls_flat.stub.reset_log()
    store.rename_file(src, dst)
    assert "copy_blob" in adls_flat.stub.ops() and "delete_blob" in adls_flat.stub.ops()
    assert adls_flat.stub.ops("dfs") == []
    after = store.stat(dst)
    assert after.etag != before.etag and after.checksum == before.checksum
    assert store.identity(before) == before.checksum


def test_a_flat_account_asks_only_the_folder_marker_after_an_empty_listing(
        adls_flat: AdlsTarget) -> None:
    """A listing that finds nothing below a directory has shown what is below it: only its
    folder marker is asked after it (a stat listed again, a round trip more on a commit's
    path before its manifests are read: the listing of the job's records of moves)."""
    store = adls_flat.managed()
    store.mkdirs(adls_flat.url("empty"))
    store.write_bytes(adls_flat.url("f.txt"), b"1")
    adls_flat.stub.reset_log()
    assert store.list_dir(adls_flat.url("empty")) == []
    with pytest.raises(PathNotFoundError):
        store.list_dir(adls_flat.url("missing"))
    with pytest.raises(StoreError, match="not a directory"):
        store.list_dir(adls_flat.url("f.txt"))
    assert store.count_children(adls_flat.url("empty")) == 0
    assert adls_flat.stub.ops() == ["list_blobs", "get_properties"] * 4
    # where no directory and an empty one are the same to the caller: the listing alone
    adls_flat.stub.reset_log()
    assert store.list_dir_or_empty(adls_flat.url("missing")) == []
    assert store.list_dir_or_empty(adls_flat.url("empty")) == []
    assert [s.path for s in store.list_dir_or_empty(adls_flat.url(""))] == [
        adls_flat.url("empty"), adls_flat.url("f.txt")]
    assert adls_flat.stub.ops() == ["list_blobs"] * 3


def test_a_flat_account_asks_a_directory_s_marker_and_what_is_below_it_at_once(
        adls_flat: AdlsTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a directory is there, asked as one (a commit's first status: its attempt
    directory, seldom a blob on a flat account): its marker and a listing below it are sent
    together, even before the account's kind is known (one after the other they were a
    round trip more on a commit's path before its manifests are read)."""
    store = adls_flat.managed()
    store.write_bytes(adls_flat.url("d", "f.txt"), b"1")
    store.mkdirs(adls_flat.url("empty"))
    stub = adls_flat.stub
    serve = stub._serve
    listed = threading.Event()
    overlapped: list[bool] = []

    async def marker_answered_once_listed(request: Any, endpoint: str) -> Any:
        if request.method == "HEAD":
            overlapped.append(await asyncio.get_running_loop().run_in_executor(
                None, listed.wait, 30.0))
        elif request.query.get("comp") == "list":
            listed.set()
        return await serve(request, endpoint)

    monkeypatch.setattr(stub, "_serve", marker_answered_once_listed)
    fresh = adls_flat.managed()
    assert fresh.exists(adls_flat.url("d"), directory=True)
    assert overlapped == [True]
    assert fresh.exists(adls_flat.url("empty"), directory=True)
    assert fresh.exists(adls_flat.url("d", "f.txt"), directory=True)  # a file is there too
    assert not fresh.exists(adls_flat.url("missing"), directory=True)


def test_rename_never_replaces_an_existing_destination(adls: AdlsTarget) -> None:
    store = adls.managed()
    src, dst = adls.url("in", "f"), adls.url("out", "f")
    store.write_bytes(dst, b"someone else's")
    store.write_bytes(src, b"mine")
    kept = store.stat(dst)
    with pytest.raises(PathExistsError):
        store.rename_file(src, dst)
    assert store.stat(dst).etag == kept.etag
    assert store.read_bytes(dst) == b"someone else's"
    assert store.read_bytes(src) == b"mine"
    assert _renames(adls) == ["dfs_rename"]  # refused by the service: no copy fallback

    moved = store.stat(src)
    store.replace_file(src, dst)  # last writer wins, still one atomic request
    [replace] = [r for r in adls.stub.requests if r.op == "dfs_rename"][1:]
    assert "If-None-Match" not in replace.headers
    assert store.stat(dst).etag == moved.etag
    assert store.read_bytes(dst) == b"mine"


def test_rename_of_missing_source_is_not_found(adls: AdlsTarget) -> None:
    store = adls.managed()
    store.mkdirs(adls.url("out"))
    with pytest.raises(PathNotFoundError):
        store.rename_file(adls.url("in", "nope"), adls.url("out", "nope"))
    assert not store.exists(adls.url("out", "nope"))


def test_missing_destination_parent_is_created_and_the_rename_retried(
        adls: AdlsTarget) -> None:
    """A namespace rename needs the destination's directory (404
    RenameDestinationParentPathNotFound); the managed store creates it and tries once more."""
    store = adls.managed()
    src, dst = adls.url("in", "f"), adls.url("new", "dir", "f")
    store.write_bytes(src, b"x")
    etag = store.stat(src).etag
    store.rename_file(src, dst, size=1, etag=etag)
    assert store.stat(dst).etag == etag
    # refused, refused again by the retry, then the directory is created and it goes through
    assert adls.stub.ops("dfs").count("dfs_rename") == 3
    assert "dfs_create" in adls.stub.ops("dfs")


def test_throttled_rename_is_retried(adls: AdlsTarget) -> None:
    store = adls.managed()
    src, dst = adls.url("in", "f"), adls.url("out", "f")
    store.write_bytes(src, b"x")
    store.mkdirs(adls.url("out"))
    adls.stub.faults.fail("dfs_rename", times=2, status=503, code="ServerBusy")
    store.rename_file(src, dst)
    assert store.read_bytes(dst) == b"x" and not store.exists(src)
    assert adls.stub.ops("dfs").count("dfs_rename") == 3
    assert store.stats.counter(st.OP_RENAME + ".failures") == 2
    assert store.stats.counter(st.STORE_IO_RETRY) >= 1


def test_lost_answer_is_recovered_only_when_the_etag_matches(adls: AdlsTarget) -> None:
    """HADOOP-18012: the rename happened but the connection dropped before its answer. The
    retry finds the source gone; the destination counts as renamed only when its etag (kept by
    the rename) is the one the manifest recorded, and its size matches."""
    store = adls.managed()
    store.mkdirs(adls.url("out"))

    def lost_rename(name: str, data: bytes, recorded: str | None, size: int) -> None:
        src, dst = adls.url("in", name), adls.url("out", name)
        store.write_bytes(src, data)
        expected = store.stat(src).etag if recorded == "own" else recorded
        adls.stub.faults.lose("dfs_rename")
        store.rename_file(src, dst, size=size, etag=expected)

    lost_rename("good", b"data", "own", 4)
    assert store.stats.counter(st.RENAME_RECOVERED) == 1
    assert store.read_bytes(adls.url("out", "good")) == b"data"
    assert adls.stub.faults.fired == [("dfs_rename", "lose")]

    # The manifest recorded an earlier version of the file: not proven.
    src = adls.url("in", "rewritten")
    store.write_bytes(src, b"v1")
    old = store.stat(src).etag
    store.write_bytes(src, b"v2")
    adls.stub.faults.lose("dfs_rename")
    with pytest.raises(AmbiguousRenameError):
        store.rename_file(src, adls.url("out", "rewritten"), size=2, etag=old)

    with pytest.raises(AmbiguousRenameError):  # right etag, wrong size
        lost_rename("size", b"data", "own", 5)
    with pytest.raises(AmbiguousRenameError):  # nothing recorded: never a silent success
        lost_rename("none", b"data", None, 4)
    assert store.stats.counter(st.RENAME_RECOVERED) == 1


def test_batch_with_throttling_and_lost_answers(adls: AdlsTarget) -> None:
    store = adls.managed()
    entries = []
    for i in range(40):
        src = adls.url("tasks", f"t{i % 4}", f"f{i}")
        store.write_bytes(src, f"{i}".encode())
        status = store.stat(src)
        entries.append((src, adls.url("dest", f"p{i % 3}", f"f{i}"), status.size,
                        store.identity(status)))
    for p in range(3):
        store.mkdirs(adls.url("dest", f"p{p}"))
    adls.stub.faults.fail("dfs_rename", times=6)
    adls.stub.faults.lose("dfs_rename", times=4)
    store.rename_batch(entries)
    assert adls.stub.faults.pending() == 0
    for src, dst, _, etag in entries:
        assert not store.exists(src)
        assert store.stat(dst).etag == etag
    # each lost answer is proven by a retry that finds the source gone, or, when the rename
    # was raced by a copy in the latency tail (on this stub, a few milliseconds), by the race
    recovered = store.stats.counter(st.RENAME_RECOVERED)
    assert recovered <= 4 <= recovered + store.stats.counter(st.RENAME_PROVEN_RACE)
    assert "copy_blob" not in adls.stub.ops()


def test_directories_are_real(adls: AdlsTarget) -> None:
    store = adls.managed()
    store.mkdirs(adls.url("a", "empty"))
    store.write_bytes(adls.url("a", "b", "f.txt"), b"1")
    assert adls.stub.sent("dfs") == ["dfs_create"]
    listed = {s.path: s.is_dir for s in store.list_dir(adls.url("a"))}
    assert listed == {adls.url("a", "empty"): True, adls.url("a", "b"): True}
    # the listing a directory's checks read: names and sizes, directories as None
    assert store.backend.child_sizes(adls.url("a")) == {"empty": None, "b": None}
    assert store.backend.child_sizes(adls.url("a", "b")) == {"f.txt": 1}
    assert store.count_children(adls.url("a", "empty")) == 0
    assert [s.path for s in store.walk_files(adls.url("a"))] == [adls.url("a", "b", "f.txt")]
    adls.stub.reset_log()
    assert store.delete_tree(adls.url("a"))
    assert adls.stub.ops() == ["dfs_delete"]  # one request for the whole tree
    assert not store.exists(adls.url("a"))
    assert not store.delete_tree(adls.url("a"))


def test_job_commit_on_a_namespace_account(adls: AdlsTarget) -> None:
    """Tasks record etags (the store's identity), job commit renames with the Data Lake API."""
    dest = adls.url("table")
    config = adls.config()
    job_id = f"j{uuid.uuid4().hex[:8]}"
    job = JobCommitter(dest, job_id, config=config, store=adls.managed())
    job.setup()
    committed = {}
    etags = {}
    for n in range(3):
        task, attempt = task_ids(job_id, n)
        ta = TaskAttemptCommitter(dest, job_id, task, attempt, config=config,
                                  store=adls.managed())
        ta.setup()
        for part in range(2):
            with ta.open_output(f"p={part}/part-{n}.csv") as out:
                out.write(f"{n},{part}\n".encode())
        manifest = ta.commit()
        for entry in manifest.files:
            assert entry.etag is not None and not entry.etag.startswith("md5:")
            etags[entry.dest] = entry.etag
        committed[task] = attempt
    adls.stub.reset_log()
    summary = job.commit(committed)
    assert summary.metrics["committer_files_committed"] == 6
    assert adls.stub.ops().count("dfs_rename") >= 6
    assert "copy_blob" not in adls.stub.ops()
    store = adls.managed()
    for n in range(3):
        for part in range(2):
            st_ = store.stat(f"{dest}/p={part}/part-{n}.csv")
            assert st_.etag in etags.values()
            assert store.read_bytes(st_.path) == f"{n},{part}\n".encode()
    assert store.exists(f"{dest}/_SUCCESS")


# -- the stub answers conditions as the service documents them --------------------------------


def test_stub_rename_conditions_through_the_sdk(adls: AdlsTarget) -> None:
    """The conditions the SDK can send on a rename, answered as the service documents them:
    a stale ``x-ms-source-if-match`` is 412, ``If-None-Match: *`` over a path is 409."""
    store = adls.managed()
    store.write_bytes(adls.url("s"), b"1")
    store.write_bytes(adls.url("d"), b"2")
    etag = store.stat(adls.url("s")).etag

    from azure.storage.filedatalake import DataLakeServiceClient

    from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

    dls = DataLakeServiceClient(adls.stub.dfs_endpoint, credential={
        "account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}, retry_total=0)

    def attempt(dst: str, **kwargs: Any) -> None:
        dls.get_file_client(adls.container, "s").rename_file(f"{adls.container}/{dst}",
                                                            **kwargs)

    with pytest.raises(HttpResponseError) as refused:
        attempt("t", source_etag='"0x1"', source_match_condition=MatchConditions.IfNotModified)
    assert refused.value.status_code == 412
    assert getattr(refused.value, "error_code", None) == "SourceConditionNotMet"
    with pytest.raises(ResourceExistsError):
        attempt("d", match_condition=MatchConditions.IfMissing)
    with pytest.raises(ResourceModifiedError):  # If-Match on a missing destination
        attempt("t", etag='"0x1"', match_condition=MatchConditions.IfNotModified)
    assert store.read_bytes(adls.url("s")) == b"1" and not store.exists(adls.url("t"))
    attempt("t", source_etag=f'"{etag}"', source_match_condition=MatchConditions.IfNotModified)
    assert store.stat(adls.url("t")).etag == etag


def test_a_task_s_new_partition_moves_with_one_data_lake_rename(adls: AdlsTarget) -> None:
    """The directory fast path on a namespace account: each task's own new partition is one
    Data Lake rename of its directory (If-None-Match: *), the shared one file by file; the
    files keep their etags; an existing directory is never replaced."""
    store = adls.managed()
    store.mkdirs(adls.url("d/a"))
    store.write_bytes(adls.url("d/a/f"), b"f")
    store.mkdirs(adls.url("d/b"))
    with pytest.raises(PathExistsError):
        store.rename_dir(adls.url("d/a"), adls.url("d/b"))
    dest = adls.url("table")
    config = adls.config()
    job_id = f"j{uuid.uuid4().hex[:8]}"
    job = JobCommitter(dest, job_id, config=config, store=adls.managed())
    job.setup()
    committed, etags = {}, {}
    for n in range(3):
        task, attempt = task_ids(job_id, n)
        ta = TaskAttemptCommitter(dest, job_id, task, attempt, config=config,
                                  store=adls.managed())
        ta.setup()
        for name in (f"own={n}/a.csv", f"own={n}/b.csv", f"shared/part-{n}.csv"):
            with ta.open_output(name) as out:
                out.write(f"{n},{name}\n".encode())
        for entry in ta.commit().files:
            etags[entry.dest] = entry.etag
        committed[task] = attempt
    adls.stub.reset_log()
    summary = job.commit(committed)
    counters = summary.iostatistics.counters
    assert counters["op_rename_directory"] == 3
    assert counters["op_rename"] == 3  # the shared partition's files
    assert summary.metrics["committer_files_committed"] == 9
    assert adls.stub.ops().count("dfs_rename") >= 6
    assert "copy_blob" not in adls.stub.ops()
    for n in range(3):
        for name in ("a.csv", "b.csv"):
            found = store.stat(f"{dest}/own={n}/{name}")
            assert store.read_bytes(found.path) == f"{n},own={n}/{name}\n".encode()
            assert any(found.etag == e for e in etags.values())
