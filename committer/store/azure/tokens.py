"""Entra ID tokens for the OAuth providers of Hadoop's ABFS connector, on the project's client.

Each provider is the request ABFS's ``AzureADAuthenticator`` sends for it (hadoop-azure's
``oauth2`` package), sent here on the lean HTTP client (``http/``) instead of through
azure-identity, so that the token endpoint is exactly the one configured (a sovereign cloud, a
private authority, a test server) and nothing but that endpoint is asked:

- ``client_credentials`` (``ClientCredsTokenProvider``, and ``UserPasswordTokenProvider``,
  which ABFS sends as the same grant with the user name and password in place of the client's):
  ``POST`` to the configured endpoint, ``grant_type=client_credentials``; ``resource`` on a v1
  endpoint, ``scope`` on a ``/v2.0/`` one;
- ``msi`` (``MsiTokenProvider``): ``GET`` of the instance metadata endpoint (default
  ``http://169.254.169.254/metadata/identity/oauth2/token``, Hadoop's
  ``fs.azure.account.oauth2.msi.endpoint``) with ``Metadata: true``, the client id of a
  user-assigned identity when given, and ``authority`` when a tenant is;
- ``workload_identity`` (``WorkloadIdentityTokenProvider``): the federated token read from its
  file on every fetch (the kubelet rotates it) and sent as a client assertion to
  ``<authority><tenant>/oauth2/v2.0/token``;
- ``refresh_token`` (``RefreshTokenBasedTokenProvider``): ``grant_type=refresh_token``; a new
  refresh token in the answer replaces the old one.

:class:`EntraTokenCredential` has azure-core's ``get_token`` shape (async), so
``auth.BearerToken`` caches its tokens and asks again five minutes before they expire. A refused
fetch is a ``StoreError`` naming the endpoint, its status and the service's error text (secrets
scrubbed); connection failures, 429 and 5xx are tried three times.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

from committer.errors import ConfigError, StoreError
from committer.store.http.connection import ConnectionPool
from committer.store.http.messages import Origin
from committer.store.http.transport import Transport
from committer.store.secrets import register_secret, scrub

__all__ = ["PROVIDERS", "AccessToken", "EntraTokenCredential", "OAuthSettings"]

RESOURCE = "https://storage.azure.com/"
SCOPE = "https://storage.azure.com/.default"
PROVIDERS = ("client_credentials", "msi", "workload_identity", "refresh_token")
_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_TIMEOUT_S = 30.0  # ABFS's connect and read timeouts for token calls
_ATTEMPTS = 3
_BACKOFF_S = 0.5


@dataclass(frozen=True)
class AccessToken:
    """azure-core's ``AccessToken`` shape: the token and its expiry (epoch seconds)."""

    token: str
    expires_on: int


@dataclass(frozen=True)
class OAuthSettings:
    """One provider's settings, from the storage options ``committer_oauth_*``."""

    provider: str
    endpoint: str
    client_id: str = ""
    client_secret: str = ""
    tenant: str = ""
    authority: str = ""
    token_file: str = ""
    refresh_token: str = ""

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(f"committer_oauth_provider: {self.provider!r} is not one of "
                              f"{PROVIDERS}")
        try:
            Origin.of(self.endpoint)
        except ValueError as e:
            raise ConfigError(f"the OAuth token endpoint {self.endpoint!r}: {e}") from None
        for value in (self.client_secret, self.refresh_token):
            if value:
                register_secret(value)

    def __repr__(self) -> str:
        return f"OAuthSettings({self.provider}, {self.endpoint})"


class EntraTokenCredential:
    """Fetches storage tokens for one provider; async ``get_token`` as azure-core's."""

    def __init__(self, settings: OAuthSettings, transport: Transport | None = None) -> None:
        self.settings = settings
        self._transport = transport or Transport()
        self._refresh_token = settings.refresh_token
        #: token fetches sent (each attempt), for tests and statistics
        self.fetches = 0

    def __repr__(self) -> str:
        return f"EntraTokenCredential({self.settings.provider}, {self.settings.endpoint})"

    def _request(self) -> tuple[str, str, dict[str, str], bytes]:
        """``(method, url, headers, body)`` of one token request."""
        s = self.settings
        if s.provider == "msi":
            query = {"api-version": "2018-02-01", "resource": RESOURCE}
            if s.tenant:
                query["authority"] = s.authority + s.tenant
            if s.client_id:
                query["client_id"] = s.client_id
            sep = "&" if urlsplit(s.endpoint).query else "?"
            return "GET", s.endpoint + sep + urlencode(query), {"metadata": "true"}, b""
        form: dict[str, str]
        if s.provider == "client_credentials":
            form = {"grant_type": "client_credentials", "client_id": s.client_id,
                    "client_secret": s.client_secret}
            if "/v2.0/" in urlsplit(s.endpoint).path:
                form["scope"] = SCOPE
            else:
                form["resource"] = RESOURCE
        elif s.provider == "workload_identity":
            form = {"grant_type": "client_credentials", "client_id": s.client_id,
                    "client_assertion_type": _ASSERTION_TYPE,
                    "client_assertion": self._assertion(), "scope": SCOPE}
        else:  # refresh_token
            form = {"grant_type": "refresh_token", "refresh_token": self._refresh_token,
                    "client_id": s.client_id, "resource": RESOURCE}
        headers = {"content-type": "application/x-www-form-urlencoded",
                   "accept": "application/json"}
        return "POST", s.endpoint, headers, urlencode(form).encode("ascii")

    def _assertion(self) -> str:
        path = self.settings.token_file
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError as e:
            raise StoreError(f"cannot read the workload identity token file {path} "
                             f"(fs.azure.account.oauth2.token.file): {e.strerror or e}",
                             path) from None
        if not text:
            raise StoreError(f"the workload identity token file {path} is empty", path)
        register_secret(text)
        return text

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                return await self._fetch()
            except _Retryable as e:
                if attempt == _ATTEMPTS:
                    raise StoreError(str(e)) from None
                await asyncio.sleep(_BACKOFF_S * attempt)
        raise AssertionError("unreachable")

    async def _fetch(self) -> AccessToken:
        method, url, headers, body = self._request()
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        origin = Origin.of(url)
        pool = ConnectionPool(origin, 1, connect_timeout=_TIMEOUT_S, read_timeout=_TIMEOUT_S,
                              **self._transport.pool_options(origin))
        endpoint = self.settings.endpoint
        self.fetches += 1
        try:
            response = await pool.request(method, target, headers | {"connection": "close"},
                                          body, max_body=1 << 20, idempotent=True)
        except (OSError, TimeoutError) as e:
            raise _Retryable(f"token endpoint {endpoint}: {type(e).__name__}: "
                             f"{scrub(str(e))}") from None
        finally:
            await pool.close()
        text = scrub(response.body[:500].decode("utf-8", "replace"))
        if response.status == 429 or response.status >= 500:
            raise _Retryable(f"token endpoint {endpoint} answered {response.status} "
                             f"{response.reason}: {text}")
        if response.status != 200:
            raise StoreError(f"token endpoint {endpoint} refused the "
                             f"{self.settings.provider} grant: {response.status} "
                             f"{response.reason}: {text}")
        try:
            doc = orjson.loads(response.body)
            token = str(doc["access_token"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise StoreError(f"token endpoint {endpoint} answered without an access_token: "
                             f"{text}") from None
        register_secret(token)
        new_refresh = doc.get("refresh_token")
        if isinstance(new_refresh, str) and new_refresh:
            register_secret(new_refresh)
            self._refresh_token = new_refresh
        return AccessToken(token, _expiry(doc))


class _Retryable(Exception):
    """A token fetch that may succeed when sent again."""


def _expiry(doc: dict[str, Any]) -> int:
    """Epoch seconds of a token answer's expiry: ``expires_in`` (seconds from now, what ABFS
    reads), else ``expires_on`` (epoch seconds, IMDS and v1 endpoints), else an hour."""
    now = time.time()
    for name, relative in (("expires_in", True), ("expires_on", False)):
        value: Any = doc.get(name)
        try:
            seconds = float(value)  # both arrive as numbers or as strings
        except (TypeError, ValueError):
            continue
        return int(now + seconds if relative else seconds)
    return int(now + 3600)
