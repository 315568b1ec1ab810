"""The ``Authorization`` header of Google Cloud Storage requests on the lean path.

gcsfs works out the credentials from the storage options (a service-account key file, the
application default credentials, a token, ``anon`` for emulators) into its
``GoogleCredentials``; this keeps the header those credentials produce and asks them again only
when the token is within five minutes of expiring, on a worker thread (refreshing is a blocking
HTTP call that must not stall the request loop). Anonymous credentials give no header.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timezone
from typing import Any

from committer.errors import StoreError
from committer.store.secrets import register_secret, scrub

__all__ = ["GcsToken"]

_REFRESH_MARGIN_S = 300.0
_NO_EXPIRY_RECHECK_S = 300.0


class GcsToken:
    """The header gcsfs's credentials give, cached until shortly before it expires."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials
        self._headers: dict[str, str] | None = None
        self._until = 0.0
        self._lock: asyncio.Lock | None = None

    @property
    def anonymous(self) -> bool:
        return getattr(self._credentials, "credentials", None) is None

    async def headers(self) -> dict[str, str]:
        """``{"authorization": "Bearer ..."}``, or nothing for anonymous access."""
        if self.anonymous:
            return {}
        if self._headers is not None and time.time() < self._until:
            return self._headers
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._headers is None or time.time() >= self._until:
                await asyncio.get_running_loop().run_in_executor(None, self._refresh)
        assert self._headers is not None
        return self._headers

    def _refresh(self) -> None:
        out: dict[str, str] = {}
        try:
            self._credentials.apply(out)  # gcsfs: refresh if needed, then the header
        except Exception as e:
            raise StoreError("could not get an access token for Google Cloud Storage: "
                             f"{scrub(f'{type(e).__name__}: {e}')[:500]}") from None
        headers = {k.lower(): v for k, v in out.items() if k.lower() == "authorization"}
        token = headers.get("authorization", "")
        if token:
            register_secret(token.split(" ", 1)[-1])
        expiry = getattr(getattr(self._credentials, "credentials", None), "expiry", None)
        if expiry is not None:
            until = expiry.replace(tzinfo=timezone.utc).timestamp() - _REFRESH_MARGIN_S
        else:
            until = time.time() + _NO_EXPIRY_RECHECK_S
        self._headers, self._until = headers, until

    def __repr__(self) -> str:
        return "GcsToken(***)"
