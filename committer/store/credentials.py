"""Credentials and endpoints from the Hadoop keys a Spark user already sets, and their redaction.

``storage_options_from_hadoop(conf, location)`` turns keys such as
``fs.azure.account.key.<account>.dfs.core.windows.net`` or
``google.cloud.auth.service.account.json.keyfile`` into the fsspec storage options of the
backend that serves ``location`` (adlfs for ``abfs``/``abfss``/``az``, gcsfs for ``gs``).
``config_for_location`` does that and also applies ``fs.azure.io.rate.limit`` to an Azure
destination when the committer's own rate limit was not set.

Every secret value seen here is registered with :func:`register_secret`; :func:`scrub` removes
registered secrets and secret-shaped fragments (SAS signatures, account keys, bearer tokens,
private keys) from any text, and :func:`redact` masks the secret entries of a mapping. Backends
pass every error message through :func:`scrub` before it becomes an exception, so a secret can
reach neither a log nor ``_SUCCESS`` nor a report.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from committer.config import SPARK_HADOOP_PREFIX, CommitterConfig
from committer.errors import ConfigError
from manifest_schema.uris import split_scheme

__all__ = [
    "AZURE_SCHEMES",
    "CONCURRENCY_KEY",
    "CONCURRENCY_OPTION",
    "GCS_SCHEMES",
    "MASK",
    "config_for_location",
    "redact",
    "register_options",
    "register_secret",
    "scrub",
    "storage_options_from_hadoop",
]

AZURE_SCHEMES = frozenset({"abfs", "abfss", "az", "wasb", "wasbs"})
GCS_SCHEMES = frozenset({"gs", "gcs"})
MASK = "***"

# Requests a cloud backend keeps in flight in one batch (renames, deletes, stats). This is not
# an fsspec option: the committer's backend factories take it out before building the filesystem.
CONCURRENCY_OPTION = "committer_concurrency"
CONCURRENCY_KEY = "mapreduce.manifest.committer.store.concurrency"
# Emulator / private endpoint for Azure Blob (Azurite): the blob service URL including the
# account path, e.g. http://127.0.0.1:10000/devstoreaccount1. Hadoop has no such key; ABFS users
# set the account host, so both are accepted.
AZURE_BLOB_ENDPOINT_KEY = "fs.azure.blob.endpoint"
AZURE_RATE_LIMIT_KEY = "fs.azure.io.rate.limit"
AZURE_DEFAULT_RATE_LIMIT = 1000
OUR_RATE_LIMIT_KEY = "mapreduce.manifest.committer.io.rate.limit"

# Option names whose values are secrets in adlfs / gcsfs / azure-identity.
_SECRET_OPTION_NAMES = frozenset({
    "account_key", "sas_token", "client_secret", "connection_string", "token", "credential",
    "password", "private_key", "refresh_token", "access_token",
})
_SECRET_KEY_HINTS = ("key", "secret", "token", "password", "sas", "credential", "connection")
# Key names that contain a hint above but hold no secret.
_NOT_SECRET_KEYS = frozenset({
    "google.cloud.auth.service.account.json.keyfile", "fs.azure.account.keyprovider",
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
        if isinstance(v, str) and _is_secret_name(str(k)):
            register_secret(v)
            if k == "connection_string":
                for part in v.split(";"):
                    name, _, value = part.partition("=")
                    if name.strip().lower() in ("accountkey", "sharedaccesssignature") and value:
                        register_secret(value)


def _is_secret_name(name: str) -> bool:
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
        elif _is_secret_name(str(k)) and v is not None:
            out[k] = MASK
        elif isinstance(v, str):
            out[k] = scrub(v)
        else:
            out[k] = v
    return out


def _strip(conf: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in conf.items():
        key = k[len(SPARK_HADOOP_PREFIX):] if k.startswith(SPARK_HADOOP_PREFIX) else k
        out[key] = str(v)
    return out


def _azure_account(location: str) -> tuple[str | None, str | None]:
    """``(account, host)`` of ``abfs[s]://container@account.dfs.core.windows.net/path``."""
    netloc = urlsplit(location).netloc
    if "@" not in netloc:
        return None, None
    host = netloc.split("@", 1)[1]
    return host.split(".", 1)[0], host


def _azure_options(conf: Mapping[str, str], location: str) -> dict[str, Any]:
    account, host = _azure_account(location)
    opts: dict[str, Any] = {}

    def pick(stem: str) -> str | None:
        # Hadoop looks up the account-qualified key first, then the bare one.
        for suffix in ([f".{host}", f".{account}"] if host else []) + [""]:
            v = conf.get(stem + suffix)
            if v:
                return v
        return None

    if account:
        opts["account_name"] = account
    endpoint = conf.get(AZURE_BLOB_ENDPOINT_KEY)
    if endpoint:
        # An emulator or private endpoint: account name from its path, a connection string so
        # that plain http is allowed.
        parts = urlsplit(endpoint)
        acct = parts.path.strip("/").split("/")[0] or account
        if not acct:
            raise ConfigError(f"{AZURE_BLOB_ENDPOINT_KEY} must name the account in its path")
        key = conf.get(f"fs.azure.account.key.{acct}") or pick("fs.azure.account.key")
        if key is None:
            raise ConfigError(f"{AZURE_BLOB_ENDPOINT_KEY} needs fs.azure.account.key.<account>")
        register_secret(key)
        opts = {"connection_string": (
            f"DefaultEndpointsProtocol={parts.scheme or 'http'};AccountName={acct};"
            f"AccountKey={key};BlobEndpoint={endpoint.rstrip('/')};")}
        register_secret(opts["connection_string"])
        return opts
    key = pick("fs.azure.account.key")
    if key:
        register_secret(key)
        opts["account_key"] = key
        return opts
    sas = pick("fs.azure.sas.fixed.token")
    if sas:
        register_secret(sas)
        opts["sas_token"] = sas
        return opts
    client_id = pick("fs.azure.account.oauth2.client.id")
    secret = pick("fs.azure.account.oauth2.client.secret")
    endpoint_url = pick("fs.azure.account.oauth2.client.endpoint")
    if client_id and secret:
        register_secret(secret)
        opts["client_id"] = client_id
        opts["client_secret"] = secret
        if endpoint_url:
            # https://login.microsoftonline.com/<tenant>/oauth2/token -> the tenant
            segs = [s for s in urlsplit(endpoint_url).path.split("/") if s]
            if not segs:
                raise ConfigError("fs.azure.account.oauth2.client.endpoint names no tenant")
            opts["tenant_id"] = segs[0]
        return opts
    if account:
        # No secret configured: adlfs falls back to DefaultAzureCredential (managed identity,
        # environment, CLI login), as ABFS does with its default token providers.
        opts["anon"] = False
    return opts


def _gcs_options(conf: Mapping[str, str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    keyfile = conf.get("google.cloud.auth.service.account.json.keyfile") or conf.get(
        "fs.gs.auth.service.account.json.keyfile")
    if keyfile:
        opts["token"] = keyfile  # gcsfs reads the JSON key file at this path
    root = conf.get("fs.gs.storage.root.url")
    if root:
        opts["endpoint_url"] = root.rstrip("/")
        if not keyfile:
            opts["token"] = "anon"  # emulators take unauthenticated requests
    project = conf.get("fs.gs.project.id")
    if project:
        opts["project"] = project
    return opts


def storage_options_from_hadoop(conf: Mapping[str, Any], location: str) -> dict[str, Any]:
    """fsspec storage options for ``location``'s store from Hadoop / Spark keys."""
    flat = _strip(conf)
    scheme, _ = split_scheme(location)
    if scheme in AZURE_SCHEMES:
        opts = _azure_options(flat, location)
    elif scheme in GCS_SCHEMES:
        opts = _gcs_options(flat)
    else:
        opts = {}
    conc = flat.get(CONCURRENCY_KEY)
    if conc:
        try:
            value = int(conc)
        except ValueError:
            raise ConfigError(f"{CONCURRENCY_KEY}: expected an integer, got {conc!r}") from None
        if value < 1:
            raise ConfigError(f"{CONCURRENCY_KEY} must be at least 1, got {value}")
        opts[CONCURRENCY_OPTION] = value
    return opts


def config_for_location(
    config: CommitterConfig, conf: Mapping[str, Any], location: str
) -> CommitterConfig:
    """``config`` with storage options for ``location`` from ``conf`` (explicit storage options
    win) and, for Azure, ``fs.azure.io.rate.limit`` (default 1000/s) as the store rate limit
    unless the committer's own ``io.rate.limit`` key was set."""
    flat = _strip(conf)
    options = storage_options_from_hadoop(flat, location)
    options.update(config.storage_options)
    register_options(options)
    changes: dict[str, Any] = {"storage_options": options}
    scheme, _ = split_scheme(location)
    if scheme in AZURE_SCHEMES and OUR_RATE_LIMIT_KEY not in flat:
        raw = flat.get(AZURE_RATE_LIMIT_KEY, str(AZURE_DEFAULT_RATE_LIMIT))
        try:
            changes["io_rate_limit"] = int(raw)
        except ValueError:
            raise ConfigError(f"{AZURE_RATE_LIMIT_KEY}: expected an integer, got {raw!r}") from None
    return dataclasses.replace(config, **changes)
