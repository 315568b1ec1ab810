"""Azure Storage Shared Key: the canonical form of a request and its signature.

Written from Azure's documentation ("Authorize with Shared Key", the Blob and Data Lake form of
service version 2009-09-19 and later): the string to sign is the verb, eleven standard headers
(an empty ``Content-Length`` when it is ``0``, service versions 2015-02-21 and later), the
``x-ms-*`` headers (names lower-cased, sorted, values trimmed) and the canonical resource:
``/<account><encoded path>`` (a path-style URL already starts with the account, which then
appears twice), then each query parameter as ``\\n<name lower-cased>:<decoded value>`` in name
order (the values of a repeated name sorted and comma-joined). The signature is the base64
HMAC-SHA256 of its UTF-8 bytes under the decoded account key.

The simulator verifies with :class:`SharedKeyVerifier`; tests and the load client sign with
:func:`sign` (the same canonical form, so a request the service would accept passes).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SharedKeyVerifier", "authorization", "sign", "string_to_sign"]

# The standard headers the string to sign covers, in its order.
_SIGNED = ("content-encoding", "content-language", "content-length", "content-md5",
           "content-type", "date", "if-modified-since", "if-match", "if-none-match",
           "if-unmodified-since", "range")


def _canonical_query(query: Iterable[tuple[str, str]]) -> str:
    grouped: dict[str, list[str]] = {}
    for name, value in query:
        grouped.setdefault(name.lower(), []).append(value)
    return "".join(f"\n{name}:{','.join(sorted(values))}"
                   for name, values in sorted(grouped.items()))


def string_to_sign(method: str, path: str, query: Iterable[tuple[str, str]],
                   headers: Mapping[str, str], account: str, *,
                   fold_whitespace: bool = False) -> str:
    """The canonical form of a request. ``path`` is the path as sent (percent-encoded),
    ``query`` the decoded parameters, ``headers`` keyed by lower-case name."""
    parts = [method]
    for name in _SIGNED:
        value = headers.get(name, "")
        if name == "content-length" and value == "0":
            value = ""
        parts.append(value)
    ms = sorted((k, v) for k, v in headers.items() if k.startswith("x-ms-"))
    if fold_whitespace:
        lines = "".join(f"{k}:{' '.join(v.split())}\n" for k, v in ms)
    else:
        lines = "".join(f"{k}:{v.strip()}\n" for k, v in ms)
    return "\n".join(parts) + "\n" + lines + "/" + account + path + _canonical_query(query)


def sign(key: bytes, message: str) -> str:
    """Base64 HMAC-SHA256 of ``message`` under the decoded account ``key``."""
    return base64.b64encode(hmac.digest(key, message.encode("utf-8"), "sha256")).decode("ascii")


def authorization(account: str, key_b64: str, method: str, path: str,
                  query: Iterable[tuple[str, str]], headers: Mapping[str, str]) -> str:
    """The ``Authorization`` header value of a request signed with the account key."""
    key = base64.b64decode(key_b64)
    return f"SharedKey {account}:" + sign(key, string_to_sign(method, path, query, headers,
                                                              account))


def _fast_string_to_sign(method: str, path: str, query: str, headers: Mapping[str, str],
                         resource_prefix: str, ms: list[str]) -> str:
    """:func:`string_to_sign` for the server's parsed headers (values already trimmed), an
    already canonical query and the sorted ``x-ms-*`` names: the per-request path, kept
    lean."""
    g = headers.get
    length = g("content-length", "")
    if length == "0":
        length = ""
    return (f"{method}\n{g('content-encoding', '')}\n{g('content-language', '')}\n{length}\n"
            f"{g('content-md5', '')}\n{g('content-type', '')}\n{g('date', '')}\n"
            f"{g('if-modified-since', '')}\n{g('if-match', '')}\n{g('if-none-match', '')}\n"
            f"{g('if-unmodified-since', '')}\n{g('range', '')}\n"
            + "".join([f"{k}:{headers[k]}\n" for k in ms]) + resource_prefix + path + query)


class SharedKeyVerifier:
    """Checks ``Authorization: SharedKey <account>:<signature>`` against the account key."""

    def __init__(self, account: str, key_b64: str) -> None:
        self.account = account
        self._key = base64.b64decode(key_b64)
        self._prefix = f"SharedKey {account}:"
        self._resource = "/" + account
        # the key's HMAC state, copied per message (cheaper than keying HMAC every time);
        # OpenSSL's object itself where there is one, without hmac.HMAC's Python wrapper
        self._hmac: Any = hmac.new(self._key, digestmod=hashlib.sha256)
        try:
            import _hashlib

            self._hmac = _hashlib.hmac_new(self._key, b"", "sha256")
        except (ImportError, AttributeError, ValueError):
            pass

    def verify(self, auth: str, method: str, path: str, query: Iterable[tuple[str, str]],
               headers: Mapping[str, str], ms_names: list[str] | None = None) -> bool:
        """True when ``auth`` is this account's valid signature of the request (``path`` as
        sent, ``query`` decoded, header names lower-case, values trimmed as a parser does;
        ``ms_names``: the sorted ``x-ms-*`` names, when the caller has them)."""
        if not auth.startswith(self._prefix):
            return False
        given = auth[len(self._prefix):].strip().encode("ascii", "replace")
        query = list(query)
        if not query:
            canonical = ""
        elif len(query) == 1:
            canonical = f"\n{query[0][0].lower()}:{query[0][1]}"
        else:
            canonical = _canonical_query(query)
        if ms_names is None:
            ms_names = sorted(k for k in headers if k.startswith("x-ms-"))
        text = _fast_string_to_sign(method, path, canonical, headers, self._resource, ms_names)
        if hmac.compare_digest(self._sign(text), given):
            return True
        # The documented forms that clients rarely need: values trimmed again, and whitespace
        # runs inside x-ms-* values folded to one space.
        for fold in (False, True):
            slow = string_to_sign(method, path, query, headers, self.account,
                                  fold_whitespace=fold)
            if slow != text and hmac.compare_digest(self._sign(slow), given):
                return True
        return False

    def _sign(self, text: str) -> bytes:
        mac = self._hmac.copy()
        mac.update(text.encode("utf-8"))
        return binascii.b2a_base64(mac.digest(), newline=False)
