"""Which proxy and which certificates a store's pools use (``committer/store/http/transport.py``):
the environment read as requests reads it, NO_PROXY matched as curl and requests match it,
explicit storage options first, and every bad value a ``ConfigError`` naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from committer.errors import ConfigError
from committer.store.credentials import storage_options_from_hadoop
from committer.store.http.messages import Origin
from committer.store.http.transport import Transport, bypasses, parse_proxy
from committer.store.secrets import scrub

HTTPS = Origin.of("https://acct.blob.core.windows.net")
HTTP = Origin.of("http://127.0.0.1:10000")


@pytest.mark.parametrize(("no_proxy", "host", "port", "expected"), [
    ("*", "anything.example", 443, True),
    ("example.com", "example.com", 443, True),
    ("example.com", "a.b.example.com", 443, True),
    (".example.com", "a.example.com", 443, True),
    ("*.example.com", "a.example.com", 443, True),
    ("example.com", "notexample.com", 443, False),
    ("  other.org , example.com ", "x.example.com", 443, True),
    ("example.com:8443", "example.com", 443, False),
    ("example.com:443", "example.com", 443, True),
    ("127.0.0.1", "127.0.0.1", 10000, True),
    ("127.0.0.1:10000", "127.0.0.1", 10000, True),
    ("127.0.0.1:10001", "127.0.0.1", 10000, False),
    ("10.0.0.0/8", "10.1.2.3", 80, True),
    ("10.0.0.0/8", "11.1.2.3", 80, False),
    ("localhost", "127.0.0.1", 80, False),  # names are not resolved (requests, curl)
    ("127.*", "127.0.0.1", 80, True),  # a Java http.nonProxyHosts wildcard
    ("[::1]", "::1", 80, True),
    ("", "example.com", 443, False),
])
def test_no_proxy_matching(no_proxy: str, host: str, port: int, expected: bool) -> None:
    assert bypasses(no_proxy, host, port) is expected


def test_proxy_urls() -> None:
    p = parse_proxy("http://user:p%40ss-word@proxy.corp:3128", "test")
    assert (p.host, p.port, p.username, p.password) == (
        "proxy.corp", 3128, "user", "p@ss-word")
    assert p.url == "http://proxy.corp:3128" and "p@ss" not in repr(p)
    assert p.authorization == "Basic dXNlcjpwQHNzLXdvcmQ="
    assert parse_proxy("proxy.corp:8080", "t").port == 8080  # no scheme: http, as curl
    assert parse_proxy("http://proxy.corp", "t").port == 80  # no port: 80, as requests
    assert "p@ss" not in scrub("proxy said p@ss-word")  # the password is registered as a secret
    for bad in ("socks5://proxy:1080", "https://proxy:443", "http://:8080", "http://h:99999"):
        with pytest.raises(ConfigError, match="test"):
            parse_proxy(bad, "test")


def test_environment_as_requests_reads_it() -> None:
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2",
           "HTTP_PROXY": "http://plain:3", "NO_PROXY": "internal.example"}
    t = Transport.resolve({}, env)
    https = t.proxy_for(HTTPS)
    http = t.proxy_for(HTTP)
    assert https is not None and https.host == "lower"  # the lower-case name first
    assert http is not None and http.host == "plain"
    assert https.source == "environment variable https_proxy"
    assert t.proxy_for(Origin.of("https://a.internal.example")) is None
    # ALL_PROXY for either scheme; HTTP_PROXY ignored in a CGI request (httpoxy)
    t = Transport.resolve({}, {"ALL_PROXY": "http://all:4", "REQUEST_METHOD": "GET",
                               "HTTP_PROXY": "http://evil:5"})
    assert [getattr(t.proxy_for(o), "host", None) for o in (HTTPS, HTTP)] == ["all", "all"]
    assert Transport.resolve({}, {}).proxy_for(HTTPS) is None
    with pytest.raises(ConfigError, match="environment variable HTTPS_PROXY"):
        Transport.resolve({}, {"HTTPS_PROXY": "socks5://x:1"})


def test_storage_options_win_over_the_environment() -> None:
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    opts = {"committer_proxy": "http://opt:8080", "committer_proxy_username": "u",
            "committer_proxy_password": "pw-secret-1", "other": 1}
    t = Transport.resolve(opts, env)
    assert opts == {"other": 1}  # taken out: adlfs / gcsfs never see them
    p = t.proxy_for(HTTPS)
    assert p is not None and (p.host, p.port, p.username, p.password) == (
        "opt", 8080, "u", "pw-secret-1")  # the environment's NO_PROXY does not apply
    t = Transport.resolve({"committer_proxy": "http://opt:8080",
                           "committer_no_proxy": ".windows.net"}, env)
    assert t.proxy_for(HTTPS) is None and t.proxy_for(HTTP) is not None
    for off in ("", "none", "DIRECT"):  # no proxy, whatever the environment says
        assert Transport.resolve({"committer_proxy": off}, env).proxy_for(HTTPS) is None
    with pytest.raises(ConfigError, match="committer_proxy"):
        Transport.resolve({"committer_proxy_username": "u"}, {})


def test_ca_bundle_sources(tmp_path: Path) -> None:
    import trustme

    bundle = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(bundle))
    t = Transport.resolve({"committer_ca_bundle": str(bundle)},
                          {"REQUESTS_CA_BUNDLE": "/nowhere"})
    assert t.ca_bundle == str(bundle) and "committer_ca_bundle" in t.ca_source
    assert Transport.resolve({}, {"REQUESTS_CA_BUNDLE": str(bundle)}).ca_bundle == str(bundle)
    assert Transport.resolve({}, {"CURL_CA_BUNDLE": str(bundle)}).ca_bundle == str(bundle)
    with pytest.raises(ConfigError, match="REQUESTS_CA_BUNDLE: no CA bundle at /nowhere"):
        Transport.resolve({}, {"REQUESTS_CA_BUNDLE": "/nowhere"})
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match="cannot load the CA bundle"):
        Transport.resolve({"committer_ca_bundle": str(garbage)}, {})
    context = Transport.resolve({}, {}).ssl_context()
    assert context.check_hostname and context.verify_mode.name == "CERT_REQUIRED"
    # one from the environment (often set machine-wide) is loaded for the first https pool
    from_env = Transport.resolve({}, {"REQUESTS_CA_BUNDLE": str(garbage)})
    with pytest.raises(ConfigError, match=r"cannot load the CA bundle .*REQUESTS_CA_BUNDLE"):
        from_env.pool_options(Origin("https", "acct.blob.core.windows.net", 443))
    assert "ssl_context" not in from_env.pool_options(Origin("http", "127.0.0.1", 10000))


def test_hadoop_proxy_keys_become_options() -> None:
    gcs = storage_options_from_hadoop({
        "spark.hadoop.fs.gs.proxy.address": "proxy.corp:3128",
        "fs.gs.proxy.username": "svc", "fs.gs.proxy.password": "gcs-proxy-pw-1",
        "https.proxyHost": "jvm.corp"}, "gs://bucket/out")
    assert {k: v for k, v in gcs.items() if k.startswith("committer_proxy")} == {
        "committer_proxy": "proxy.corp:3128", "committer_proxy_username": "svc",
        "committer_proxy_password": "gcs-proxy-pw-1"}  # the connector's own key wins
    assert "gcs-proxy-pw-1" not in scrub("gcs-proxy-pw-1")
    azure = storage_options_from_hadoop({
        "https.proxyHost": "jvm.corp", "https.proxyPort": "8443",
        "http.nonProxyHosts": "*.internal.example|localhost"},
        "abfs://c@acct.dfs.core.windows.net/out")
    assert azure["committer_proxy"] == "http://jvm.corp:8443"
    assert azure["committer_no_proxy"] == "*.internal.example,localhost"
    # the JVM's defaults: port 443, localhost and 127.* bypassed
    azure = storage_options_from_hadoop({"https.proxyHost": "jvm.corp"}, "abfs://c@a/out")
    t = Transport.resolve(dict(azure), {})
    assert t.proxy_for(HTTPS) is not None and t.proxy_for(HTTP) is None
    assert azure["committer_proxy"] == "http://jvm.corp:443"
    assert storage_options_from_hadoop({"https.proxyHost": "h"}, "/local/path") == {}
    with pytest.raises(ConfigError, match=r"fs\.gs\.proxy\.username"):
        storage_options_from_hadoop({"fs.gs.proxy.address": "p:1",
                                     "fs.gs.proxy.username": "u"}, "gs://b/x")
    with pytest.raises(ConfigError, match=r"fs\.gs\.proxy\.address"):
        storage_options_from_hadoop({"fs.gs.proxy.address": "proxy.corp"}, "gs://b/x")
    with pytest.raises(ConfigError, match=r"https\.proxyPort"):
        storage_options_from_hadoop({"https.proxyHost": "h", "https.proxyPort": "x"},
                                    "abfs://c@a/x")
