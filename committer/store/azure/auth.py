"""Authorising Azure Storage requests on the lean path: Shared Key, SAS, or a bearer token.

The credential comes from where it always came from: adlfs builds its ``BlobServiceClient``
from the storage options (connection string, account key, SAS, service principal, the default
credential chain) and :func:`azure_auth` reads what that client holds. Then, per request:

- **Shared Key**: an HMAC-SHA256 of the request's canonical form ("Authorize with Shared Key",
  service version 2009-09-19 and later) under the account key, decoded once. The signature
  covers the request's own verb, path and headers, so it is computed per request (a few
  microseconds); the ``x-ms-date`` it covers is formatted once per second.
- **SAS**: the token's query string, appended to every request; nothing to compute.
- **Bearer token** (Entra ID): ``Authorization: Bearer ...`` from the credential's
  ``get_token``, kept until five minutes before it expires and then fetched again, once, by
  whichever request finds it stale (a synchronous credential is asked on a worker thread, so
  the loop never blocks on the identity endpoint).

No secret is kept in a form that reaches text: ``__repr__`` hides it, and the key and SAS are
registered with ``secrets.register_secret`` so that ``scrub`` masks them in any message.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import inspect
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from committer.errors import ConfigError, StoreError
from committer.store.secrets import register_secret

__all__ = ["AzureAuth", "BearerToken", "NoAuth", "Sas", "SharedKey", "azure_auth", "http_date"]

STORAGE_SCOPE = "https://storage.azure.com/.default"
_REFRESH_MARGIN_S = 300.0

# The request headers Shared Key covers by name, at their place in the string it signs ("date"
# stays empty: x-ms-date is sent instead).
_STANDARD = {name: i for i, name in enumerate((
    "content-encoding", "content-language", "content-length", "content-md5", "content-type",
    "date", "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"))}

_date_cache: list[tuple[int, str]] = [(0, "")]


def http_date(now: float | None = None) -> str:
    """RFC 1123 date of ``now`` (or the current second), formatted once per second."""
    second = int(time.time() if now is None else now)
    cached = _date_cache[0]
    if cached[0] == second:
        return cached[1]
    text = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(second))
    _date_cache[0] = (second, text)
    return text


class AzureAuth:
    """How one account's requests are authorised. ``query`` is appended to every request's
    query string (a SAS); ``authorization`` gives the ``Authorization`` header, if any."""

    query: str = ""
    signs: bool = False  # True: the header depends on the request (Shared Key)

    async def authorization(self, method: str, path: str, query: Sequence[tuple[str, str]],
                            headers: Mapping[str, str]) -> str | None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(***)"


class NoAuth(AzureAuth):
    """Anonymous access (public containers)."""

    def __repr__(self) -> str:
        return "NoAuth()"


class SharedKey(AzureAuth):
    """Shared Key: each request signed with the account key."""

    signs = True

    def __init__(self, account: str, key: str) -> None:
        try:
            decoded = base64.b64decode(key, validate=True)
        except ValueError:
            raise ConfigError(f"the account key of {account} is not valid base64") from None
        register_secret(key)
        self.account = account
        self._prefix = "SharedKey " + account + ":"
        # the key's HMAC state, computed once; each signature continues a copy of it
        self._hmac = hmac.new(decoded, digestmod=hashlib.sha256)

    def string_to_sign(self, method: str, path: str, query: Sequence[tuple[str, str]],
                       headers: Mapping[str, str]) -> str:
        """The canonical form of a request. ``path`` is the encoded path as sent (for a
        path-style endpoint it starts with the account, which then appears twice, as the
        service expects); ``query`` holds decoded values; ``headers`` has lower-case names."""
        standard = ["", "", "", "", "", "", "", "", "", "", ""]
        ms: list[tuple[str, str]] = []
        for name, value in headers.items():
            at = _STANDARD.get(name)
            if at is not None:
                standard[at] = value
            elif name[:5] == "x-ms-":
                ms.append((name, value))
        if standard[2] == "0":
            standard[2] = ""  # service version 2015-02-21 and later sign an empty length as ""
        ms.sort()
        canonical = (method + "\n" + "\n".join(standard) + "\n"
                     + "".join([f"{k}:{v}\n" for k, v in ms]) + f"/{self.account}{path}")
        if query:
            canonical += "".join([f"\n{k.lower()}:{v}" for k, v in sorted(query)])
        return canonical

    def sign(self, method: str, path: str, query: Sequence[tuple[str, str]],
             headers: Mapping[str, str]) -> str:
        mac = self._hmac.copy()
        mac.update(self.string_to_sign(method, path, query, headers).encode("utf-8"))
        return self._prefix + base64.b64encode(mac.digest()).decode("ascii")

    async def authorization(self, method: str, path: str, query: Sequence[tuple[str, str]],
                            headers: Mapping[str, str]) -> str | None:
        return self.sign(method, path, query, headers)


class Sas(AzureAuth):
    """A shared access signature: its query string goes on every request."""

    def __init__(self, token: str) -> None:
        token = token.lstrip("?")
        if "sig=" not in token:
            raise ConfigError("the SAS token has no signature (sig=)")
        register_secret(token)
        for _, value in parse_qsl(token):
            if len(value) >= 16:
                register_secret(value)
        self.query = token


class BearerToken(AzureAuth):
    """An Entra ID token from an azure-core ``TokenCredential`` (sync or async), cached."""

    def __init__(self, credential: Any, scope: str = STORAGE_SCOPE) -> None:
        self._credential = credential
        self._scope = scope
        self._header: str | None = None
        self._expires = 0.0
        self._lock: asyncio.Lock | None = None

    async def authorization(self, method: str, path: str, query: Sequence[tuple[str, str]],
                            headers: Mapping[str, str]) -> str | None:
        if self._header is not None and time.time() < self._expires - _REFRESH_MARGIN_S:
            return self._header
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._header is None or time.time() >= self._expires - _REFRESH_MARGIN_S:
                await self._refresh()
        assert self._header is not None
        return self._header

    async def _refresh(self) -> None:
        get_token = self._credential.get_token
        try:
            if inspect.iscoroutinefunction(get_token):
                token = await get_token(self._scope)
            else:
                token = await asyncio.get_running_loop().run_in_executor(
                    None, get_token, self._scope)
        except Exception as e:
            from committer.store.secrets import scrub

            raise StoreError(f"could not get an access token for Azure Storage: "
                             f"{scrub(f'{type(e).__name__}: {e}')[:500]}") from None
        register_secret(token.token)
        self._header = f"Bearer {token.token}"
        self._expires = float(token.expires_on)


def azure_auth(service_client: Any) -> AzureAuth:
    """The authorisation of adlfs's ``BlobServiceClient`` (its credential and URL), for the
    lean path. Shared Key is recognised by the account name and key the client's policy
    holds; a SAS by the signature in the client's URL (or an ``AzureSasCredential``); a bearer
    token by ``get_token``; nothing else is anonymous."""
    credential = getattr(service_client, "credential", None)
    name = getattr(credential, "account_name", None)
    key = getattr(credential, "account_key", None)
    if name and key and not hasattr(credential, "get_token"):
        return SharedKey(str(name), str(key))
    if credential is not None and hasattr(credential, "get_token"):
        return BearerToken(credential)
    signature = getattr(credential, "signature", None)  # AzureSasCredential
    if isinstance(signature, str) and signature:
        return Sas(signature)
    query = urlsplit(str(getattr(service_client, "url", ""))).query
    if "sig=" in query:
        return Sas(query)
    return NoAuth()
