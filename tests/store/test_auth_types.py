"""Every auth type of Hadoop's ABFS and GCS connectors (docs/stores.md, "Auth types"): the ones
that run here fetch their token from a token endpoint this test runs on 127.0.0.1 and commit on
the simulated account, which accepts only that token; the ones that cannot run are refused at
job setup with a ``ConfigError`` naming the key, before any request reaches the account."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest

from committer.config import CommitterConfig
from committer.errors import ConfigError, StoreError
from committer.job import JobCommitter
from committer.spark import engine
from committer.store import open_store
from committer.store.credentials import config_for_location, storage_options_from_hadoop
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.cloud_sim import CloudSim, start_cloud_sim
from committer.testing.cloud_sim.process import CloudSimError
from committer.testing.emulators import AZURITE_ACCOUNT
from tests.committer.helpers import fast_config

TOKEN = f"sim-token-{uuid.uuid4().hex}"
ABFS_HOST = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"
OAUTH2 = "org.apache.hadoop.fs.azurebfs.oauth2."


class TokenServer:
    """A token endpoint on 127.0.0.1: answers every request with ``TOKEN`` (or, for a path
    ending ``/service-accounts/default/``, a GCE service-account description) and records
    what it was asked."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.token = TOKEN
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                parts = urlsplit(self.path)
                owner.requests.append({
                    "method": self.command, "path": parts.path,
                    "query": dict(parse_qsl(parts.query)), "form": dict(parse_qsl(body)),
                    "headers": {k.lower(): v for k, v in self.headers.items()}})
                if parts.path.endswith("/service-accounts/default/"):
                    doc: dict[str, Any] = {"email": "sa@sim.iam.gserviceaccount.com",
                                           "scopes": ["https://www.googleapis.com/auth/"
                                                      "devstorage.full_control"],
                                           "aliases": ["default"]}
                elif owner.status != 200:
                    doc = {"error": "invalid_client", "error_description": "AADSTS7000215"}
                else:
                    doc = {"access_token": owner.token, "expires_in": 3600,
                           "token_type": "Bearer"}
                data = json.dumps(doc).encode()
                self.send_response(owner.status if "error" in doc else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tokens() -> Iterator[TokenServer]:
    server = TokenServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def adls_sim() -> Iterator[CloudSim]:
    with start_cloud_sim(service="adls", latency_ms=0, p99_ms=0, bearer_token=TOKEN) as sim:
        yield sim


@pytest.fixture(scope="module")
def gcs_sim() -> Iterator[CloudSim]:
    with start_cloud_sim(service="gcs", latency_ms=0, p99_ms=0, bearer_token=TOKEN) as sim:
        yield sim


def _commit(loc: str, config: CommitterConfig) -> dict[str, Any]:
    """Job setup, one task writing one file, job commit; the ``_SUCCESS`` document."""
    store = open_store(loc, config)
    job_id = f"j{uuid.uuid4().hex[:10]}"
    job = JobCommitter(loc, job_id, config=config, store=store)
    job.setup()
    task_id, attempt_id = task_ids(job_id, 0)
    ta = TaskAttemptCommitter(loc, job_id, task_id, attempt_id, config=config, store=store)
    ta.setup()
    with ta.open_output("year=2026/part-0") as out:
        out.write(b"payload")
    ta.commit()
    job.commit()
    assert store.read_bytes(f"{loc}/year=2026/part-0") == b"payload"
    doc: dict[str, Any] = orjson.loads(store.read_bytes(f"{loc}/_SUCCESS"))
    store.backend.close()
    return doc


def _azure_commit(sim: CloudSim, conf: Mapping[str, str]) -> dict[str, Any]:
    loc = f"abfs://c{uuid.uuid4().hex[:10]}/table"
    conf = {"fs.azure.blob.endpoint": sim.blob_endpoint, **conf}
    base = fast_config(storage_options={"committer_dfs_endpoint": sim.dfs_endpoint})
    return _commit(loc, config_for_location(base, conf, loc))


# -- Azure: what runs -------------------------------------------------------------------------


def test_oauth_client_credentials(adls_sim: CloudSim, tokens: TokenServer) -> None:
    endpoint = f"{tokens.url}/tenant-guid/oauth2/token"
    doc = _azure_commit(adls_sim, {
        "fs.azure.account.auth.type": "OAuth",
        "fs.azure.account.oauth.provider.type": OAUTH2 + "ClientCredsTokenProvider",
        "fs.azure.account.oauth2.client.id": "app-id",
        f"fs.azure.account.oauth2.client.secret.{AZURITE_ACCOUNT}": "app-secret-value",
        "fs.azure.account.oauth2.client.endpoint": endpoint})
    assert doc["success"] is True
    first = tokens.requests[0]
    assert first["method"] == "POST" and first["path"] == "/tenant-guid/oauth2/token"
    assert first["form"] == {"grant_type": "client_credentials", "client_id": "app-id",
                             "client_secret": "app-secret-value",
                             "resource": "https://storage.azure.com/"}
    assert len(tokens.requests) == 1  # cached for the whole commit


def test_oauth_user_password_is_the_client_grant(adls_sim: CloudSim,
                                                  tokens: TokenServer) -> None:
    doc = _azure_commit(adls_sim, {
        "fs.azure.account.auth.type": "OAuth",
        "fs.azure.account.oauth.provider.type": "UserPasswordTokenProvider",
        "fs.azure.account.oauth2.user.name": "user",
        "fs.azure.account.oauth2.user.password": "user-password-value",
        "fs.azure.account.oauth2.client.endpoint": f"{tokens.url}/t/oauth2/v2.0/token"})
    assert doc["success"] is True
    assert tokens.requests[0]["form"] == {
        "grant_type": "client_credentials", "client_id": "user",
        "client_secret": "user-password-value", "scope": "https://storage.azure.com/.default"}


@pytest.mark.parametrize("client_id", ["", "mi-client-id"])
def test_managed_identity(adls_sim: CloudSim, tokens: TokenServer, client_id: str) -> None:
    conf = {"fs.azure.account.auth.type": "OAuth",
            "fs.azure.account.oauth.provider.type": OAUTH2 + "MsiTokenProvider",
            "fs.azure.account.oauth2.msi.endpoint":
                f"{tokens.url}/metadata/identity/oauth2/token"}
    if client_id:
        conf["fs.azure.account.oauth2.client.id"] = client_id
        conf["fs.azure.account.oauth2.msi.tenant"] = "tenant-guid"
    assert _azure_commit(adls_sim, conf)["success"] is True
    asked = tokens.requests[0]
    assert asked["method"] == "GET" and asked["headers"]["metadata"] == "true"
    expected = {"api-version": "2018-02-01", "resource": "https://storage.azure.com/"}
    if client_id:
        expected |= {"client_id": client_id,
                     "authority": "https://login.microsoftonline.com/tenant-guid"}
    assert asked["query"] == expected


def test_workload_identity(adls_sim: CloudSim, tokens: TokenServer, tmp_path: Path) -> None:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("federated.jwt.assertion\n")
    doc = _azure_commit(adls_sim, {
        "fs.azure.account.auth.type": "OAuth",
        "fs.azure.account.oauth.provider.type": OAUTH2 + "WorkloadIdentityTokenProvider",
        "fs.azure.account.oauth2.msi.authority": tokens.url,
        "fs.azure.account.oauth2.msi.tenant": "tenant-guid",
        "fs.azure.account.oauth2.client.id": "wi-client",
        "fs.azure.account.oauth2.token.file": str(token_file)})
    assert doc["success"] is True
    asked = tokens.requests[0]
    assert asked["path"] == "/tenant-guid/oauth2/v2.0/token"
    assert asked["form"] == {
        "grant_type": "client_credentials", "client_id": "wi-client",
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": "federated.jwt.assertion",
        "scope": "https://storage.azure.com/.default"}


def test_refresh_token(adls_sim: CloudSim, tokens: TokenServer) -> None:
    doc = _azure_commit(adls_sim, {
        "fs.azure.account.auth.type": "OAuth",
        "fs.azure.account.oauth.provider.type": OAUTH2 + "RefreshTokenBasedTokenProvider",
        "fs.azure.account.oauth2.client.id": "app-id",
        "fs.azure.account.oauth2.refresh.token": "refresh-token-value",
        "fs.azure.account.oauth2.refresh.token.endpoint": f"{tokens.url}/Common/oauth2/token"})
    assert doc["success"] is True
    assert tokens.requests[0]["form"]["grant_type"] == "refresh_token"
    assert tokens.requests[0]["form"]["refresh_token"] == "refresh-token-value"


def test_wrong_token_is_refused_by_the_simulator(adls_sim: CloudSim) -> None:
    """The simulator checks the token, so the tests above prove theirs was sent."""
    loc = f"abfs://c{uuid.uuid4().hex[:10]}/t"
    other = TokenServer()
    try:
        conf = {"fs.azure.blob.endpoint": adls_sim.blob_endpoint,
                "fs.azure.account.auth.type": "OAuth",
                "fs.azure.account.oauth.provider.type": "MsiTokenProvider",
                "fs.azure.account.oauth2.msi.endpoint": other.url + "/x"}
        other.token = "not-the-token"
        cfg = config_for_location(fast_config(retry_attempts=1), conf, loc)
        store = open_store(loc, cfg)
        with pytest.raises(StoreError, match="401"):
            store.mkdirs(loc)
        store.backend.close()
        assert len(other.requests) == 1
    finally:
        other.close()


def test_refused_token_fetch_names_the_endpoint(adls_sim: CloudSim,
                                                 tokens: TokenServer) -> None:
    tokens.status = 401
    loc = f"abfs://c{uuid.uuid4().hex[:10]}/t"
    conf = {"fs.azure.blob.endpoint": adls_sim.blob_endpoint,
            "fs.azure.account.auth.type": "OAuth",
            "fs.azure.account.oauth.provider.type": "ClientCredsTokenProvider",
            "fs.azure.account.oauth2.client.id": "app",
            "fs.azure.account.oauth2.client.secret": "a-secret-never-shown",
            "fs.azure.account.oauth2.client.endpoint": f"{tokens.url}/t/oauth2/token"}
    cfg = config_for_location(fast_config(retry_attempts=1), conf, loc)
    job = JobCommitter(loc, f"j{uuid.uuid4().hex[:8]}", config=cfg)
    with pytest.raises(StoreError) as caught:
        job.setup()
    text = str(caught.value)
    assert f"{tokens.url}/t/oauth2/token" in text and "401" in text
    assert "a-secret-never-shown" not in text
    with pytest.raises(CloudSimError, match="no bucket"):  # nothing was created
        adls_sim.objects(loc.split("/")[2])


# -- Azure and GCS: what is refused at setup ----------------------------------------------------

REFUSED_AZURE = {
    "custom token provider": ({"fs.azure.account.auth.type": "Custom",
                               "fs.azure.account.oauth.provider.type": "com.example.MyProvider"},
                              "fs.azure.account.oauth.provider.type"),
    "OAuth with a user class": ({"fs.azure.account.auth.type": "OAuth",
                                 "fs.azure.account.oauth.provider.type": "com.example.Tokens"},
                                "fs.azure.account.oauth.provider.type"),
    "SAS token provider class": ({"fs.azure.account.auth.type": "SAS",
                                  "fs.azure.sas.token.provider.type": "com.example.Sas",
                                  "fs.azure.sas.fixed.token": "sv=1&sig=x"},
                                 "fs.azure.sas.token.provider.type"),
    "key provider class": ({"fs.azure.account.auth.type": "SharedKey",
                            "fs.azure.account.keyprovider": "org.apache.hadoop.fs.azurebfs."
                                                            "services.ShellDecryptionKeyProvider"},
                           "fs.azure.account.keyprovider"),
    "client assertion provider": ({
        "fs.azure.account.auth.type": "OAuth",
        "fs.azure.account.oauth.provider.type": OAUTH2 + "WorkloadIdentityTokenProvider",
        "fs.azure.account.oauth2.msi.tenant": "t", "fs.azure.account.oauth2.client.id": "c",
        "fs.azure.account.oauth2.client.assertion.provider.type": "com.example.Assertion"},
        "fs.azure.account.oauth2.client.assertion.provider.type"),
    "delegation tokens": ({"fs.azure.enable.delegation.token": "true"},
                          "fs.azure.enable.delegation.token"),
    "OAuth without its provider": ({"fs.azure.account.auth.type": "OAuth"},
                                   "fs.azure.account.oauth.provider.type"),
    "client credentials without secret": ({
        "fs.azure.account.auth.type": "OAuth",
        "fs.azure.account.oauth.provider.type": "ClientCredsTokenProvider",
        "fs.azure.account.oauth2.client.id": "c",
        "fs.azure.account.oauth2.client.endpoint": "https://login.example/t/oauth2/token"},
        "fs.azure.account.oauth2.client.secret"),
    "unknown auth type": ({"fs.azure.account.auth.type": "Kerberos"},
                          "fs.azure.account.auth.type"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_AZURE))
def test_azure_refused_at_setup(adls_sim: CloudSim, case: str) -> None:
    conf, key = REFUSED_AZURE[case]
    _refused_by_the_engine(adls_sim, f"abfs://c{uuid.uuid4().hex[:10]}@{ABFS_HOST}/t",
                           {"fs.azure.blob.endpoint": adls_sim.blob_endpoint, **conf}, key)


REFUSED_GCS = {
    "access token provider (v3)": ({"fs.gs.auth.type": "ACCESS_TOKEN_PROVIDER",
                                    "fs.gs.auth.access.token.provider": "com.example.P"},
                                   "fs.gs.auth.access.token.provider"),
    "access token provider (v2)": ({"fs.gs.auth.access.token.provider.impl": "com.example.P"},
                                   "fs.gs.auth.access.token.provider.impl"),
    "impersonation": ({"fs.gs.auth.impersonation.service.account": "sa@p.iam"},
                      "fs.gs.auth.impersonation.service.account"),
    "PKCS12 key": ({"google.cloud.auth.service.account.keyfile": "/keys/sa.p12"},
                   "google.cloud.auth.service.account.keyfile"),
    "inline private key": ({"fs.gs.auth.service.account.private.key": "-----BEGIN..."},
                           "fs.gs.auth.service.account.private.key"),
    "installed application flow": ({"google.cloud.auth.service.account.enable": "false"},
                                   "google.cloud.auth.service.account.enable"),
    "missing key file": ({"fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE",
                          "fs.gs.auth.service.account.json.keyfile": "/no/such/key.json"},
                         "fs.gs.auth.service.account.json.keyfile"),
    "user credentials incomplete": ({"fs.gs.auth.type": "USER_CREDENTIALS",
                                     "fs.gs.auth.client.id": "c"}, "fs.gs.auth.client.secret"),
    "unknown auth type": ({"fs.gs.auth.type": "KERBEROS"}, "fs.gs.auth.type"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_GCS))
def test_gcs_refused_at_setup(gcs_sim: CloudSim, case: str) -> None:
    conf, key = REFUSED_GCS[case]
    _refused_by_the_engine(gcs_sim, f"gs://b{uuid.uuid4().hex[:10]}/t",
                           {"fs.gs.storage.root.url": gcs_sim.gcs_endpoint, **conf}, key)


def _refused_by_the_engine(sim: CloudSim, dest: str, conf: Mapping[str, str], key: str) -> None:
    """setupJob through the Spark engine's request handler: a ConfigError naming ``key``, and
    not one request at the simulated account."""
    for name in conf:
        assert engine.forwarded(name), f"the shim would not forward {name}"
    sim.reset_stats()
    response = engine.handle({"operation": "setupJob", "jobId": "job-1", "jobAttempt": 0,
                              "destinationUri": dest, "conf": dict(conf)})
    assert response["ok"] is False, response
    assert response["errorType"] == "ConfigError", response
    assert key in response["error"], response["error"]
    stats = sim.stats()  # nothing was sent: the destination is untouched
    assert stats["requests"] == 0 and stats["by_op"] == {}, stats


# -- GCS: what runs -----------------------------------------------------------------------------


def _gcs_commit(sim: CloudSim, conf: Mapping[str, str]) -> dict[str, Any]:
    loc = f"gs://b{uuid.uuid4().hex[:10]}/table"
    conf = {"fs.gs.storage.root.url": sim.gcs_endpoint, "fs.gs.project.id": "sim", **conf}
    return _commit(loc, config_for_location(fast_config(), conf, loc))


def _service_account_file(path: Path, token_uri: str) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "sim", "private_key_id": "kid",
        "private_key": pem, "client_email": "sa@sim.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri}))
    return path


@pytest.mark.parametrize("key", ["fs.gs.auth.service.account.json.keyfile",
                                 "google.cloud.auth.service.account.json.keyfile"])
def test_gcs_service_account_key_file(gcs_sim: CloudSim, tokens: TokenServer, tmp_path: Path,
                                      key: str) -> None:
    keyfile = _service_account_file(tmp_path / "sa.json", f"{tokens.url}/token")
    doc = _gcs_commit(gcs_sim, {"fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE",
                                key: str(keyfile)})
    assert doc["success"] is True
    assert tokens.requests[0]["form"]["grant_type"] == \
        "urn:ietf:params:oauth:grant-type:jwt-bearer"


def test_gcs_user_credentials(gcs_sim: CloudSim, tokens: TokenServer) -> None:
    doc = _gcs_commit(gcs_sim, {"fs.gs.auth.type": "USER_CREDENTIALS",
                                "fs.gs.auth.client.id": "cid",
                                "fs.gs.auth.client.secret": "client-secret-value",
                                "fs.gs.auth.refresh.token": "refresh-token-value",
                                "fs.gs.token.server.url": tokens.url + "/"})
    assert doc["success"] is True
    assert tokens.requests[0]["path"] == "/token"
    assert tokens.requests[0]["form"]["refresh_token"] == "refresh-token-value"


def test_gcs_application_default_credentials(gcs_sim: CloudSim, tokens: TokenServer,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # a service-account file: google-auth keeps its token_uri (an authorized_user file's
    # would be replaced by Google's own endpoint)
    adc = _service_account_file(tmp_path / "adc.json", f"{tokens.url}/token")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    doc = _gcs_commit(gcs_sim, {"fs.gs.auth.type": "APPLICATION_DEFAULT"})
    assert doc["success"] is True
    assert tokens.requests[0]["form"]["grant_type"] == \
        "urn:ietf:params:oauth:grant-type:jwt-bearer"


def test_gcs_unauthenticated_is_anonymous() -> None:
    for conf in ({"fs.gs.auth.type": "UNAUTHENTICATED"},
                 {"google.cloud.auth.null.enable": "true"}):
        assert storage_options_from_hadoop(conf, "gs://b/x") == {"token": "anon"}


def test_gcs_metadata_server(gcs_sim: CloudSim, tokens: TokenServer) -> None:
    """COMPUTE_ENGINE: the metadata server's token, at ``GCE_METADATA_HOST`` (which google-auth
    reads when it is imported, hence a fresh process)."""
    script = (
        "import sys, uuid\n"
        "from tests.store.test_auth_types import _gcs_commit\n"
        "class S:\n"
        "    gcs_endpoint = sys.argv[1]\n"
        "doc = _gcs_commit(S(), {'fs.gs.auth.type': 'COMPUTE_ENGINE'})\n"
        "assert doc['success'] is True\n"
        "print('committed')\n")
    env = dict(os.environ, GCE_METADATA_HOST=tokens.url.removeprefix("http://"))
    done = subprocess.run([sys.executable, "-c", script, gcs_sim.gcs_endpoint], check=False,
                          env=env,
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "committed" in done.stdout
    paths = [r["path"] for r in tokens.requests]
    assert any(p.endswith("/token") and "/service-accounts/" in p for p in paths), paths
    assert all(r["headers"].get("metadata-flavor") == "Google" for r in tokens.requests)


# -- what the keys become -----------------------------------------------------------------------


def test_no_auth_type_keeps_the_keys_present() -> None:
    """Without ``fs.azure.account.auth.type`` the keys present decide, as before."""
    assert storage_options_from_hadoop({}, f"abfss://c@{ABFS_HOST}/t") == {
        "account_name": AZURITE_ACCOUNT, "anon": False}
    shared = storage_options_from_hadoop(
        {"fs.azure.account.auth.type": "SharedKey",
         f"fs.azure.account.key.{ABFS_HOST}": "a2V5"}, f"abfss://c@{ABFS_HOST}/t")
    assert shared == {"account_name": AZURITE_ACCOUNT, "account_key": "a2V5"}
    with pytest.raises(ConfigError, match=r"fs\.azure\.account\.key"):
        storage_options_from_hadoop({"fs.azure.account.auth.type": "SharedKey"},
                                    f"abfss://c@{ABFS_HOST}/t")
    with pytest.raises(ConfigError, match=r"fs\.azure\.sas\.fixed\.token"):
        storage_options_from_hadoop({"fs.azure.account.auth.type": "SAS"},
                                    f"abfss://c@{ABFS_HOST}/t")
