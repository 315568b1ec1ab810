"""Hadoop credential keys -> storage options, and secrets kept out of every message."""

from __future__ import annotations

import logging
import traceback
import uuid
from pathlib import Path

import orjson
import pytest

from committer.config import CommitterConfig
from committer.errors import ConfigError, StoreError
from committer.job import JobCommitter
from committer.store import open_store
from committer.store.credentials import (
    CONCURRENCY_KEY,
    CONCURRENCY_OPTION,
    config_for_location,
    storage_options_from_hadoop,
)
from committer.store.secrets import MASK, redact, register_secret, scrub
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.emulators import AZURITE_ACCOUNT, RunningEmulator

ABFS = "abfss://data@myacct.dfs.core.windows.net/warehouse/t"
HOST = "myacct.dfs.core.windows.net"


def test_account_key_qualified_by_host() -> None:
    key = "a2V5LWZvci10ZXN0cy1vbmx5LW5vdC1hLXJlYWwta2V5"
    opts = storage_options_from_hadoop(
        {f"spark.hadoop.fs.azure.account.key.{HOST}": key}, ABFS)
    assert opts == {"account_name": "myacct", "account_key": key}


def test_sas_token_and_oauth() -> None:
    sas = "sv=2024-01-01&ss=b&sig=c2lnbmF0dXJlLWZvci10ZXN0cw%3D%3D"
    assert storage_options_from_hadoop({f"fs.azure.sas.fixed.token.{HOST}": sas}, ABFS) == {
        "account_name": "myacct", "sas_token": sas}
    conf = {
        "fs.azure.account.oauth2.client.id": "11111111-2222-3333-4444-555555555555",
        f"fs.azure.account.oauth2.client.secret.{HOST}": "client-secret-value-xyz",
        "fs.azure.account.oauth2.client.endpoint":
            "https://login.microsoftonline.com/tenant-guid/oauth2/token",
    }
    assert storage_options_from_hadoop(conf, ABFS) == {
        "account_name": "myacct", "client_id": "11111111-2222-3333-4444-555555555555",
        "client_secret": "client-secret-value-xyz", "tenant_id": "tenant-guid"}


def test_no_secret_means_default_credential_chain() -> None:
    assert storage_options_from_hadoop({}, ABFS) == {"account_name": "myacct", "anon": False}


def test_emulator_blob_endpoint_becomes_connection_string() -> None:
    opts = storage_options_from_hadoop({
        "fs.azure.blob.endpoint": "http://127.0.0.1:10000/devstoreaccount1",
        "fs.azure.account.key.devstoreaccount1": "ZW11bGF0b3Ita2V5LWZvci10ZXN0cw==",
    }, "abfs://container/x")
    assert opts == {"connection_string": (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=ZW11bGF0b3Ita2V5LWZvci10ZXN0cw==;"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;")}
    with pytest.raises(ConfigError):
        storage_options_from_hadoop({"fs.azure.blob.endpoint": "http://127.0.0.1:1/acct"},
                                    "abfs://c/x")


def test_abfs_endpoint_names_the_data_lake_endpoint_as_abfs_reaches_it() -> None:
    """ABFS's own override (``host:port``, the account in the path; plain http only with
    ``fs.azure.always.use.https=false`` on abfs://): the engine's Data Lake endpoint is
    the one ABFS reaches, and its Blob endpoint too unless fs.azure.blob.endpoint says."""
    key = "ZW11bGF0b3Ita2V5LWZvci10ZXN0cw=="
    dest = "abfs://data@devstoreaccount1.dfs.core.windows.net/t"
    conf = {"fs.azure.abfs.endpoint": "127.0.0.1:10004",
            "fs.azure.always.use.https": "false",
            "fs.azure.account.key.devstoreaccount1.dfs.core.windows.net": key}
    assert storage_options_from_hadoop(conf, dest) == {
        "connection_string": (
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
            f"AccountKey={key};BlobEndpoint=http://127.0.0.1:10004/devstoreaccount1;"),
        "committer_dfs_endpoint": "http://127.0.0.1:10004/devstoreaccount1"}
    both = storage_options_from_hadoop(
        {**conf, "fs.azure.blob.endpoint": "http://127.0.0.1:10000/devstoreaccount1"}, dest)
    assert "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;" in \
        both["connection_string"]
    assert both["committer_dfs_endpoint"] == "http://127.0.0.1:10004/devstoreaccount1"
    # https unless told otherwise, and always for abfss://
    secure = storage_options_from_hadoop({**conf, "fs.azure.always.use.https": "true"}, dest)
    assert secure["committer_dfs_endpoint"] == "https://127.0.0.1:10004/devstoreaccount1"
    abfss = storage_options_from_hadoop(conf, dest.replace("abfs://", "abfss://"))
    assert abfss["committer_dfs_endpoint"].startswith("https://")
    # ABFS ignores a value without a port; so does the engine
    plain = storage_options_from_hadoop({**conf, "fs.azure.abfs.endpoint": "localhost"}, dest)
    assert plain == {"account_name": "devstoreaccount1", "account_key": key}
    with pytest.raises(ConfigError, match=r"fs\.azure\.abfs\.endpoint"):
        storage_options_from_hadoop({**conf, "fs.azure.abfs.endpoint": "host:port"}, dest)


def test_gcs_keys(tmp_path: Path) -> None:
    keyfile = tmp_path / "sa.json"
    keyfile.write_text("{}")
    assert storage_options_from_hadoop({
        "google.cloud.auth.service.account.json.keyfile": str(keyfile),
        "fs.gs.project.id": "proj",
    }, "gs://bucket/x") == {"token": str(keyfile), "project": "proj"}
    # a path that is not there is refused, not taken by gcsfs for a raw access token
    with pytest.raises(ConfigError, match="cannot be read"):
        storage_options_from_hadoop({"fs.gs.auth.service.account.json.keyfile":
                                     str(tmp_path / "missing.json")}, "gs://bucket/x")
    assert storage_options_from_hadoop(
        {"fs.gs.storage.root.url": "http://127.0.0.1:4443/"}, "gs://b/x"
    ) == {"endpoint_url": "http://127.0.0.1:4443", "token": "anon"}


def test_concurrency_key() -> None:
    assert storage_options_from_hadoop({CONCURRENCY_KEY: "64"}, "gs://b/x") == {
        CONCURRENCY_OPTION: 64}
    with pytest.raises(ConfigError):
        storage_options_from_hadoop({CONCURRENCY_KEY: "0"}, "gs://b/x")


def test_azure_rate_limit_applies_unless_ours_is_set() -> None:
    base = CommitterConfig()
    # neither set: not Hadoop's 1,000 but unset, the store's default cap (10,000 on a cloud
    # store, see tests/committer/store/test_managed.py)
    assert config_for_location(base, {}, ABFS).io_rate_limit is None
    assert config_for_location(base, {"fs.azure.io.rate.limit": "50"}, ABFS).io_rate_limit == 50
    ours = {"mapreduce.manifest.committer.io.rate.limit": "7", "fs.azure.io.rate.limit": "50"}
    assert config_for_location(CommitterConfig(io_rate_limit=7), ours, ABFS).io_rate_limit == 7
    # a cap set in the committer's own configuration wins over the Azure key too
    assert config_for_location(CommitterConfig(io_rate_limit=0), {"fs.azure.io.rate.limit": "50"},
                               ABFS).io_rate_limit == 0
    with pytest.raises(ConfigError, match=r"fs\.azure\.io\.rate\.limit"):
        config_for_location(base, {"fs.azure.io.rate.limit": "fast"}, ABFS)
    assert config_for_location(base, {"fs.azure.io.rate.limit": "50"},
                               "gs://b/x").io_rate_limit is None  # Azure's key, not GCS's
    # explicit storage options win over the Hadoop keys
    explicit = CommitterConfig(storage_options={"account_key": "explicit-key-value"})
    key_conf = {f"fs.azure.account.key.{HOST}": "hadoop-key-value"}
    merged = config_for_location(explicit, key_conf, ABFS)
    assert merged.storage_options["account_key"] == "explicit-key-value"


def test_redact_and_scrub() -> None:
    secret = f"never-print-me-{uuid.uuid4().hex}"
    register_secret(secret)
    assert scrub(f"failed with {secret} inside") == f"failed with {MASK} inside"
    shown = redact({"account_name": "acct", "account_key": secret, "sas_token": "sv=1&sig=abc",
                    "nested": {"client_secret": "x" * 10}, "endpoint_url": "http://h"})
    assert shown == {"account_name": "acct", "account_key": MASK, "sas_token": MASK,
                     "nested": {"client_secret": MASK}, "endpoint_url": "http://h"}
    # secret-shaped fragments an SDK may print, never registered
    text = ("GET https://a.blob.core.windows.net/c/b?sv=2024&sig=AbC%2Bdef%3D&se=1 "
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0;"
            ' {"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY-----"}'
            " Authorization: Bearer eyJhbGciOi.payload.sig")
    cleaned = scrub(text)
    for fragment in ("AbC%2Bdef%3D", "c2VjcmV0", "MIIE", "eyJhbGciOi"):
        assert fragment not in cleaned
    assert "AccountName=a" in cleaned  # what is not secret stays readable


@pytest.mark.emulator
def test_secrets_never_printed_on_azure(azurite_emulator: RunningEmulator,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """A wrong key (the store refuses it) and a right one (a full commit): neither appears in
    an exception, its traceback, the log, ``_SUCCESS`` or the summary report."""
    caplog.set_level(logging.DEBUG)
    container = f"c{uuid.uuid4().hex[:12]}"
    endpoint = azurite_emulator.endpoint
    wrong_key = "d3Jvbmcta2V5LWZvci10ZXN0cy1vbmx5LXdyb25nLWtleS0xMjM0NTY3ODkw"
    conf = {"fs.azure.blob.endpoint": endpoint,
            f"fs.azure.account.key.{AZURITE_ACCOUNT}": wrong_key}
    loc = f"abfs://{container}/t"
    cfg = config_for_location(CommitterConfig(retry_attempts=1), conf, loc)
    with pytest.raises(StoreError) as caught:
        store = open_store(loc, cfg)
        store.write_bytes(f"{loc}/f", b"x")
    printed = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert wrong_key not in printed
    assert wrong_key not in caplog.text

    right_key = str(azurite_emulator.storage_options["connection_string"]).split(
        "AccountKey=")[1].split(";")[0]
    conf[f"fs.azure.account.key.{AZURITE_ACCOUNT}"] = right_key
    cfg = config_for_location(CommitterConfig(), conf, loc)
    store = open_store(loc, cfg)
    store.mkdirs(f"abfs://{container}")
    job_id = f"j{uuid.uuid4().hex[:10]}"
    job = JobCommitter(loc, job_id, config=cfg, store=store)
    job.setup()
    task_id, attempt_id = task_ids(job_id, 0)
    ta = TaskAttemptCommitter(loc, job_id, task_id, attempt_id, config=cfg, store=store)
    ta.setup()
    with ta.open_output("part-0") as out:
        out.write(b"data")
    ta.commit()
    summary = job.commit()
    success = store.read_bytes(f"{loc}/_SUCCESS").decode()
    assert orjson.loads(success)["success"] is True
    for text in (success, orjson.dumps(summary.to_json()).decode(), caplog.text):
        assert right_key not in text
        assert wrong_key not in text
    store.backend.close()
