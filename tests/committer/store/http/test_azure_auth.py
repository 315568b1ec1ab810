"""Azure authorisation on the lean path: Shared Key signatures equal the Azure SDK's own for
every request shape the backend sends; SAS and bearer tokens; nothing secret in ``repr``.

(The emulator suites prove the signatures against Azurite, which checks them; this pins each
request shape here, including names that need escaping, without a server.)"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from committer.errors import ConfigError, StoreError
from committer.store.azure.auth import (
    BearerToken,
    NoAuth,
    Sas,
    SharedKey,
    azure_auth,
    http_date,
)
from committer.store.secrets import scrub
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

DATE = "Wed, 25 Nov 2026 08:31:26 GMT"
# (method, URL as sent, headers): the shapes AzureStore sends, on a path-style endpoint
REQUESTS = [
    ("GET", "http://127.0.0.1:10000/devstoreaccount1/?restype=account&comp=properties", {}),
    ("PUT", "http://127.0.0.1:10000/devstoreaccount1/c%20x/p%3D1/part%200.csv",
     {"x-ms-blob-type": "BlockBlob", "content-type": "application/octet-stream",
      "if-none-match": "*", "content-length": "11"}),
    ("PUT", "http://127.0.0.1:10000/devstoreaccount1/c/dir",
     {"x-ms-blob-type": "BlockBlob", "x-ms-meta-hdi_isfolder": "true", "if-none-match": "*",
      "content-type": "application/octet-stream"}),
    ("PUT", "http://127.0.0.1:10000/devstoreaccount1/c/out/f%23%C3%BC",
     {"x-ms-copy-source": "http://127.0.0.1:10000/devstoreaccount1/c/in/f%23%C3%BC",
      "if-none-match": "*"}),
    ("HEAD", "http://127.0.0.1:10000/devstoreaccount1/c/out/f", {}),
    ("DELETE", "http://127.0.0.1:10000/devstoreaccount1/c/in/f", {}),
    ("GET", "http://127.0.0.1:10000/devstoreaccount1/c?restype=container&comp=list&include="
     "metadata&maxresults=5000&prefix=a%20b%25c%2F&delimiter=%2F&marker=2%21x", {}),
    ("POST", "http://127.0.0.1:10000/devstoreaccount1/c?restype=container&comp=batch",
     {"content-type": "multipart/mixed; boundary=batch_1", "content-length": "300"}),
    ("PUT", "https://acct.dfs.core.windows.net/fs/out/p%3Da%253Ab/f?mode=legacy",
     {"x-ms-rename-source": "/fs/in/p%3Da%253Ab/f", "if-none-match": "*"}),
    ("DELETE", "https://acct.dfs.core.windows.net/fs/tasks/t0?recursive=true", {}),
    ("PUT", "https://acct.dfs.core.windows.net/fs/a/b?resource=directory", {}),
]


def _sdk_signature(account: str, key: str, method: str, url: str,
                   headers: dict[str, str]) -> str:
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.pipeline.transport import HttpRequest
    from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

    request = HttpRequest(method, url, headers=dict(headers))
    SharedKeyCredentialPolicy(account, key).on_request(  # type: ignore[no-untyped-call]
        PipelineRequest(request, PipelineContext(None)))
    return str(request.headers["Authorization"])


@pytest.mark.parametrize(("method", "url", "extra"), REQUESTS)
def test_shared_key_signature_is_the_sdk_s(method: str, url: str,
                                           extra: dict[str, str]) -> None:
    headers = {"x-ms-version": "2023-11-03", "x-ms-date": DATE, **extra}
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = SharedKey(AZURITE_ACCOUNT, AZURITE_KEY).sign(method, parts.path, query, headers)
    assert ours == _sdk_signature(AZURITE_ACCOUNT, AZURITE_KEY, method, url, headers)
    assert ours.startswith(f"SharedKey {AZURITE_ACCOUNT}:")


def test_shared_key_needs_a_valid_key_and_hides_it() -> None:
    with pytest.raises(ConfigError):
        SharedKey("acct", "not base64!")
    auth = SharedKey("acct", AZURITE_KEY)
    assert AZURITE_KEY not in repr(auth)
    assert AZURITE_KEY not in scrub(f"failed with key {AZURITE_KEY}")


def test_credentials_are_recognised_from_the_blob_client() -> None:
    from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

    key = SharedKeyCredentialPolicy("acct", AZURITE_KEY)  # type: ignore[no-untyped-call]
    assert isinstance(azure_auth(SimpleNamespace(credential=key, url="https://a/")), SharedKey)
    sas = azure_auth(SimpleNamespace(credential=None,
                                     url="https://a.blob.x/?sv=2025-01-01&sp=rl&sig=abc%3D"))
    assert isinstance(sas, Sas) and sas.query == "sv=2025-01-01&sp=rl&sig=abc%3D"
    assert "sig=abc" not in scrub("GET https://a.blob.x/?sv=2025-01-01&sp=rl&sig=abc%3D")
    token = azure_auth(SimpleNamespace(credential=SimpleNamespace(get_token=lambda s: None),
                                       url="https://a/"))
    assert isinstance(token, BearerToken)
    assert isinstance(azure_auth(SimpleNamespace(credential=None, url="https://a/")), NoAuth)
    with pytest.raises(ConfigError):
        Sas("sv=2025&sp=r")  # no signature


class _Credential:
    """A token credential counting its calls; each token lives ``life`` seconds."""

    def __init__(self, life: float, fail: bool = False) -> None:
        self.calls = 0
        self.life = life
        self.fail = fail

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        self.calls += 1
        if self.fail:
            raise RuntimeError("identity endpoint said no (client_secret=hunter22)")
        return SimpleNamespace(token=f"tok{self.calls}", expires_on=time.time() + self.life)


def test_bearer_token_is_cached_until_near_expiry_and_asked_once_by_many() -> None:
    async def main() -> None:
        long_lived = _Credential(3600)
        auth = BearerToken(long_lived)
        values = await asyncio.gather(*(auth.authorization("GET", "/", (), {})
                                        for _ in range(50)))
        assert set(values) == {"Bearer tok1"} and long_lived.calls == 1
        short = _Credential(60)  # inside the five-minute margin: fetched each time
        auth = BearerToken(short)
        await auth.authorization("GET", "/", (), {})
        assert await auth.authorization("GET", "/", (), {}) == "Bearer tok2"

        async def async_token(*scopes: str) -> Any:
            return SimpleNamespace(token="async", expires_on=time.time() + 3600)

        assert await BearerToken(SimpleNamespace(get_token=async_token)).authorization(
            "GET", "/", (), {}) == "Bearer async"
        with pytest.raises(StoreError) as failed:
            await BearerToken(_Credential(3600, fail=True)).authorization("GET", "/", (), {})
        assert "hunter22" not in str(failed.value)

    asyncio.run(main())


def test_http_date_is_rfc_1123() -> None:
    assert http_date(1_795_000_000) == time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                                     time.gmtime(1_795_000_000))
    assert http_date().endswith(" GMT")
