"""Secrets kept out of every message: registered values and secret-shaped text masked.

Every secret value the store layer sees (from Hadoop keys in ``credentials.py``, from storage
options, from token answers) is registered with :func:`register_secret`; :func:`scrub` removes
registered secrets and secret-shaped fragments (SAS signatures, account keys, bearer tokens,
private keys) from any text, and :func:`redact` masks the secret entries of a mapping.
Backends pass every error message through :func:`scrub` before it becomes an exception, so a
secret can reach neither a log nor ``_SUCCESS`` nor a report.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "is_secret_name", "redact", "register_options", "register_secret", "scrub"]

MASK = "***"

# Option names whose values are secrets in adlfs / gcsfs / azure-identity.
_SECRET_OPTION_NAMES = frozenset({
    "account_key", "sas_token", "client_secret", "connection_string", "token", "credential",
    "password", "private_key", "refresh_token", "access_token",
})
_SECRET_KEY_HINTS = ("key", "secret", "token", "password", "sas", "credential", "connection")
# Key names that contain a hint above but hold no secret.
_NOT_SECRET_KEYS = frozenset({
    "google.cloud.auth.service.account.json.keyfile", "fs.azure.account.keyprovider",
    "fs.azure.account.oauth2.token.file", "committer_oauth_token_file",
    "fs.azure.sas.token.provider.type", "fs.gs.auth.access.token.provider",
})

# Secret-shaped fragments, for text whose secrets were never registered (an SDK's own message).
_SECRET_FIELDS = r"(?:client_secret|private_key|refresh_token|access_token|account_key|sas_token)"
_PATTERNS = (
    re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----)[\s\S]*?(?=-----END|$)"),
    re.compile(r"(?i)(\bsig=)[^&\s\"'<>]+"),
    re.compile(r"(?i)(AccountKey=)[^;\s\"'<>]+"),
    re.compile(r"(?i)(SharedAccessSignature=)[^;\s\"'<>]+"),
    re.compile(r"(?i)(Authorization:\s*(?:Bearer|SharedKey)\s+)[^\s,\"'<>]+"),
    re.compile(r"(?i)(\"" + _SECRET_FIELDS + r"\"\s*:\s*\")(?:\\.|[^\"\\])*"),
    re.compile(r"(?i)(\b" + _SECRET_FIELDS + r"\s*=\s*)[^&\s,;]+"),
)

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Remember ``value`` so that :func:`scrub` removes it from any text from now on."""
    if len(value) >= 6:  # shorter values would mask ordinary words
        with _secrets_lock:
            _secrets.add(value)


def scrub(text: str) -> str:
    """``text`` with every registered secret and every secret-shaped fragment masked."""
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, MASK)
    for p in _PATTERNS:
        text = p.sub(lambda m: m.group(1) + MASK, text)
    return text


def register_options(options: Mapping[str, Any]) -> None:
    """Register the secret values of storage options passed directly (not from Hadoop keys)."""
    for k, v in options.items():
        if isinstance(v, str) and is_secret_name(str(k)):
            register_secret(v)
            if k == "connection_string":
                for part in v.split(";"):
                    name, _, value = part.partition("=")
                    if name.strip().lower() in ("accountkey", "sharedaccesssignature") and value:
                        register_secret(value)


def is_secret_name(name: str) -> bool:
    low = name.lower()
    if low in _NOT_SECRET_KEYS or low.endswith(".keyfile"):
        return False
    if low in _SECRET_OPTION_NAMES:
        return True
    return any(h in low for h in _SECRET_KEY_HINTS) and not low.endswith(
        ("keyprovider", "key.provider", "concurrency"))


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` fit to print: secret entries masked, nested mappings too."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        if isinstance(v, Mapping):
            out[k] = redact(v)
        elif is_secret_name(str(k)) and v is not None:
            out[k] = MASK
        elif isinstance(v, str):
            out[k] = scrub(v)
        else:
            out[k] = v
    return out
