"""Commits through a real HTTP proxy (proxy.py on 127.0.0.1, with and without Basic
authentication) and over HTTPS (the simulated account and the ADLS stub serving a test CA's
certificate, trustme), against the simulated account: exact, the proxy's access log showing
the connections went through it; and the failures that must come before anything moves (an
unreachable proxy, a proxy that wants credentials, a certificate that does not verify, a name
mismatch), each naming the proxy or the endpoint."""

from __future__ import annotations

import re
import socket
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from committer.errors import ManifestCommitterError, StoreError
from committer.job import JobCommitter
from committer.store import ManagedStore, open_backend, open_store
from committer.store.http.connection import ConnectionPool
from committer.store.http.transport import EndpointRefusedError
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.adls_stub import adls_stub
from committer.testing.cloud_sim import CloudSim, CloudSimError, start_cloud_sim
from committer.testing.http_proxy import HttpProxy, http_proxy
from tests.committer.helpers import fast_config

AUTH = "committer:proxy-pw-7f3a"
FILES = {"year=2026/part-0 a b.parquet": b"zero", "p=\u00fc/part-1 %3A#.parquet": b"one"}


@dataclass(frozen=True)
class Pems:
    """A test CA and a server certificate it issued, as files."""

    ca: str
    cert: str
    key: str


def _issue(directory: Path, ca: trustme.CA, *names: str) -> Pems:
    directory.mkdir(parents=True, exist_ok=True)
    server = ca.issue_cert(*names)
    pems = Pems(str(directory / "ca.pem"), str(directory / "cert.pem"), str(directory / "key.pem"))
    ca.cert_pem.write_to_path(pems.ca)
    server.cert_chain_pems[0].write_to_path(pems.cert)
    for extra in server.cert_chain_pems[1:]:
        extra.write_to_path(pems.cert, append=True)
    server.private_key_pem.write_to_path(pems.key)
    return pems


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or CA bundle from the machine's environment: each test sets its own."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE",
                 "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Pems:
    return _issue(tmp_path_factory.mktemp("tls"), trustme.CA(), "127.0.0.1")


# A proxy per test: it logs a connection when the connection closes, so a proxy shared with
# an earlier test could still be logging that test's connections while this one counts its
# own. Each test waits for the lines of the connections it opened (HttpProxy.served): at
# least those, since a connection given up while it was being opened (a hedged copy of a
# slow request, cancelled when the request answered first: how many, the machine's speed
# decides) reached the proxy without counting as opened.


@pytest.fixture
def plain_proxy() -> Iterator[HttpProxy]:
    with http_proxy() as proxy:
        yield proxy


@pytest.fixture
def auth_proxy() -> Iterator[HttpProxy]:
    with http_proxy(auth=AUTH) as proxy:
        yield proxy


@pytest.fixture(scope="module", params=["adls", "gcs"])
def sim(request: pytest.FixtureRequest) -> Iterator[CloudSim]:
    with start_cloud_sim(service=str(request.param), latency_ms=0, p99_ms=0) as running:
        yield running


@pytest.fixture(scope="module", params=["adls", "gcs"])
def tls_sim(request: pytest.FixtureRequest, pems: Pems) -> Iterator[CloudSim]:
    with start_cloud_sim(service=str(request.param), latency_ms=0, p99_ms=0,
                         tls_cert=pems.cert, tls_key=pems.key) as running:
        yield running


def _options(sim: CloudSim, **extra: Any) -> dict[str, Any]:
    return {**sim.storage_options, "committer_concurrency": 16, **extra}


def _dest(sim: CloudSim) -> str:
    return f"{sim.scheme}://b{uuid.uuid4().hex[:10]}/table"


def _commit(store: ManagedStore, dest: str) -> dict[str, bytes]:
    """A job of two tasks committed through ``store``; the files found at ``dest`` after."""
    job_id = f"j{uuid.uuid4().hex[:10]}"
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    job.setup()
    committed = {}
    for n in range(2):
        task_id, attempt_id = task_ids(job_id, n, 0)
        ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=store.config,
                                  store=store)
        ta.setup()
        for rel, data in FILES.items():
            with ta.open_output(f"{rel}.t{n}") as out:
                out.write(data)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    assert job.commit(committed_tasks=committed).success
    return {s.path[len(dest) + 1:]: store.read_bytes(s.path) for s in store.walk_files(dest)
            if not s.path[len(dest) + 1:].startswith("_")}


def _expected() -> dict[str, bytes]:
    return {f"{rel}.t{n}": data for n in range(2) for rel, data in FILES.items()}


def _pools(store: ManagedStore) -> list[ConnectionPool]:
    return [p for p in store.backend._resources.items()  # type: ignore[attr-defined]
            if isinstance(p, ConnectionPool)]


def _sim_ports(sim: CloudSim) -> set[int]:
    return {port for name, port in sim.ports.items() if name in ("blob", "dfs", "gcs")}


def _untouched(sim: CloudSim, dest: str) -> None:
    """Nothing was created at the account for ``dest`` (not even its bucket)."""
    bucket = dest.split("://", 1)[1].split("/", 1)[0]
    try:
        found = sim.objects(bucket)
    except CloudSimError as e:
        assert "NoSuchBucket" in str(e)
        return
    assert found == [], "something reached the account"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- through a proxy -------------------------------------------------------------------------

@pytest.mark.parametrize("authenticated", [False, True], ids=["open", "basic-auth"])
def test_commit_through_a_proxy_is_exact(sim: CloudSim, plain_proxy: HttpProxy,
                                         auth_proxy: HttpProxy, authenticated: bool) -> None:
    proxy = auth_proxy if authenticated else plain_proxy
    dest = _dest(sim)
    store = open_store(dest, fast_config(storage_options=_options(
        sim, committer_proxy=proxy.url_with_auth)))
    assert _commit(store, dest) == _expected()
    pools = _pools(store)
    opened = sum(p.connections_opened for p in pools)
    assert pools and all(p.proxy is not None for p in pools) and opened > 0
    store.backend.close()
    # every connection the store opened is one the proxy served, to the account's ports
    served = proxy.served(opened)
    assert len(served) >= opened
    assert {line.port for line in served} <= _sim_ports(sim)
    assert all(line.method != "CONNECT" for line in served)  # http: forwarded, not tunnelled
    assert AUTH.split(":")[1] not in proxy.log_text()


def test_environment_proxy_and_no_proxy(sim: CloudSim, plain_proxy: HttpProxy,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", plain_proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    dest = _dest(sim)
    opened = 0  # through the proxy
    for bypass in (False, True):
        if bypass:
            monkeypatch.setenv("NO_PROXY", "localhost, 127.0.0.1")
        backend = open_backend(dest, _options(sim))
        backend.write_bytes(f"{dest}/file-{bypass}", b"x")
        assert backend.read_bytes(f"{dest}/file-{bypass}") == b"x"
        pools = [p for p in backend.resources if isinstance(p, ConnectionPool)]  # type: ignore[attr-defined]
        assert pools and all((p.proxy is None) is bypass for p in pools)
        opened += 0 if bypass else sum(p.connections_opened for p in pools)
        backend.close()
        # the connections opened through the proxy, and only those, were the proxy's
        assert opened > 0 and len(plain_proxy.served(opened)) >= opened


def test_an_unreachable_proxy_fails_before_anything_moves(sim: CloudSim) -> None:
    proxy = f"http://127.0.0.1:{_dead_port()}"
    dest = _dest(sim)
    store = open_store(dest, fast_config(retry_attempts=2, storage_options=_options(
        sim, committer_proxy=proxy)))
    with pytest.raises(ManifestCommitterError) as caught:
        _commit(store, dest)
    text = str(caught.value) + str(caught.value.__cause__ or "")
    assert f"could not connect to proxy {proxy} (from storage option committer_proxy)" in text
    store.backend.close()
    _untouched(sim, dest)


def test_a_proxy_asking_for_credentials(sim: CloudSim, auth_proxy: HttpProxy) -> None:
    dest = _dest(sim)
    for options, expected in (
            ({"committer_proxy": auth_proxy.url}, "no proxy credentials are configured"),
            ({"committer_proxy": auth_proxy.url, "committer_proxy_username": "committer",
              "committer_proxy_password": "wrong-pw-91c"}, "refused the credentials of user "
                                                          "'committer'")):
        store = open_store(dest, fast_config(storage_options=_options(sim, **options)))
        with pytest.raises(EndpointRefusedError) as caught:
            _commit(store, dest)
        message = str(caught.value)
        assert f"proxy {auth_proxy.url}" in message and "407" in message
        assert expected in message and "wrong-pw" not in message
        store.backend.close()
    _untouched(sim, dest)


# -- over TLS --------------------------------------------------------------------------------

def test_commit_over_https_is_exact(tls_sim: CloudSim, pems: Pems) -> None:
    dest = _dest(tls_sim)
    store = open_store(dest, fast_config(storage_options=_options(
        tls_sim, committer_ca_bundle=pems.ca)))
    assert tls_sim.blob_endpoint.startswith("https://") if tls_sim.scheme == "abfs" \
        else tls_sim.gcs_endpoint.startswith("https://")
    assert _commit(store, dest) == _expected()
    assert all(p._ssl is not None for p in _pools(store))
    store.backend.close()


def test_commit_over_https_through_a_connect_tunnel(tls_sim: CloudSim, pems: Pems,
                                                   auth_proxy: HttpProxy) -> None:
    dest = _dest(tls_sim)
    store = open_store(dest, fast_config(storage_options=_options(
        tls_sim, committer_ca_bundle=pems.ca, committer_proxy=auth_proxy.url_with_auth)))
    assert _commit(store, dest) == _expected()
    opened = sum(p.connections_opened for p in _pools(store))
    store.backend.close()
    served = auth_proxy.served(opened)
    assert len(served) >= opened > 0
    assert all(line.method == "CONNECT" and line.port in _sim_ports(tls_sim) for line in served)
    # and without credentials: the tunnel is refused, naming the proxy
    store = open_store(dest, fast_config(storage_options=_options(
        tls_sim, committer_ca_bundle=pems.ca, committer_proxy=auth_proxy.url)))
    with pytest.raises(EndpointRefusedError, match=r"asks for authentication \(407\)"):
        store.exists(dest + "/x")
    store.backend.close()


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
def test_ca_bundle_from_the_environment(tls_sim: CloudSim, pems: Pems, variable: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, pems.ca)
    dest = _dest(tls_sim)
    backend = open_backend(dest, _options(tls_sim))
    backend.write_bytes(dest + "/f", b"tls")
    assert backend.read_bytes(dest + "/f") == b"tls"
    backend.close()


def _refused(sim: CloudSim, options: dict[str, Any], match: str) -> None:
    dest = _dest(sim)
    store = open_store(dest, fast_config(storage_options=options))
    with pytest.raises(StoreError) as caught:
        _commit(store, dest)
    store.backend.close()
    error = caught.value
    assert isinstance(error, EndpointRefusedError), repr(error)
    endpoint = sim.gcs_endpoint if sim.scheme == "gs" else sim.blob_endpoint
    origin = endpoint.rsplit("/", 1)[0] if sim.scheme == "abfs" else endpoint
    assert f"TLS: the certificate of {origin}" in str(error)
    assert match in str(error)
    _untouched(sim, dest)


def test_an_untrusted_certificate_is_refused_before_anything_moves(
        tls_sim: CloudSim, tmp_path: Path) -> None:
    # the system's store does not know the test CA; nor does a bundle of another CA
    _refused(tls_sim, _options(tls_sim), "unable to get local issuer certificate")
    other = _issue(tmp_path / "other", trustme.CA(), "127.0.0.1")
    _refused(tls_sim, _options(tls_sim, committer_ca_bundle=other.ca), other.ca)


def test_a_name_mismatch_is_refused(tmp_path: Path) -> None:
    pems = _issue(tmp_path, trustme.CA(), "storage.example")
    with start_cloud_sim(service="gcs", latency_ms=0, p99_ms=0, tls_cert=pems.cert,
                         tls_key=pems.key) as sim:
        _refused(sim, _options(sim, committer_ca_bundle=pems.ca), "IP address mismatch")


def test_adls_stub_over_https(pems: Pems) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pems.cert, pems.key)
    with adls_stub(ssl_context=context) as stub:
        assert stub.dfs_endpoint.startswith("https://")
        backend = open_backend("abfs://data", {**stub.storage_options,
                                               "committer_ca_bundle": pems.ca})
        backend.mkdirs("abfs://data/out")
        backend.write_bytes("abfs://data/in", b"renamed over tls")
        backend.rename_file("abfs://data/in", "abfs://data/out/f")
        assert backend.read_bytes("abfs://data/out/f") == b"renamed over tls"
        assert "dfs_rename" in stub.ops()  # the Data Lake rename, over HTTPS
        backend.close()
        refused = open_backend("abfs://data", stub.storage_options)
        origin = stub.blob_endpoint.rsplit("/", 1)[0]
        with pytest.raises(EndpointRefusedError, match=re.escape(f"certificate of {origin} ")):
            refused.exists("abfs://data/in")
        refused.close()
