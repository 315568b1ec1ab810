"""Credentials and endpoints from the Hadoop keys a Spark user already sets, and their redaction.

``storage_options_from_hadoop(conf, location)`` turns keys such as
``fs.azure.account.key.<account>.dfs.core.windows.net`` or
``google.cloud.auth.service.account.json.keyfile`` into the fsspec storage options of the
backend that serves ``location`` (adlfs for ``abfs``/``abfss``/``az``, gcsfs for ``gs``).
``config_for_location`` does that and also applies ``fs.azure.io.rate.limit``, when it is
set, to an Azure destination whose committer rate limit was not set (neither set: the cloud
stores' default cap, ``config.DEFAULT_CLOUD_RATE_LIMIT``, not Hadoop's 1,000).

Every secret value seen here is registered (``secrets.py``), so that no message shows it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from committer.config import SPARK_HADOOP_PREFIX, CommitterConfig
from committer.errors import ConfigError
from committer.store.secrets import is_secret_name, register_options, register_secret
from manifest_schema.uris import split_scheme

__all__ = [
    "AZURE_SCHEMES",
    "CONCURRENCY_KEY",
    "CONCURRENCY_OPTION",
    "GCS_SCHEMES",
    "config_for_location",
    "storage_options_from_hadoop",
]

AZURE_SCHEMES = frozenset({"abfs", "abfss", "az", "wasb", "wasbs"})
GCS_SCHEMES = frozenset({"gs", "gcs"})

# Requests a cloud backend keeps in flight in one batch (renames, deletes, stats). This is not
# an fsspec option: the committer's backend factories take it out before building the filesystem.
CONCURRENCY_OPTION = "committer_concurrency"
CONCURRENCY_KEY = "mapreduce.manifest.committer.store.concurrency"
# Emulator / private endpoint for Azure Blob (Azurite): the blob service URL including the
# account path, e.g. http://127.0.0.1:10000/devstoreaccount1. Hadoop has no such key; ABFS users
# set the account host, so both are accepted.
AZURE_BLOB_ENDPOINT_KEY = "fs.azure.blob.endpoint"
# ABFS's own endpoint override, as its tests and emulator users set it: "host:port" puts the
# account in the path (http[s]://host:port/<account>/<filesystem>), over http when
# fs.azure.always.use.https is false and the scheme is abfs. The engine's Data Lake endpoint
# is then that one, and so is its Blob endpoint unless fs.azure.blob.endpoint names another
# (ABFS's own Blob client, in Hadoop 3.5, sends its Blob requests to the same host:port).
ABFS_ENDPOINT_KEY = "fs.azure.abfs.endpoint"
ABFS_ALWAYS_HTTPS_KEY = "fs.azure.always.use.https"
AZURE_RATE_LIMIT_KEY = "fs.azure.io.rate.limit"
OUR_RATE_LIMIT_KEY = "mapreduce.manifest.committer.io.rate.limit"

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

    # an emulator endpoint names the account when the URL does not
    named = urlsplit(conf.get(AZURE_BLOB_ENDPOINT_KEY) or "").path.strip("/").split("/")[0]

    def pick(stem: str) -> str | None:
        # Hadoop looks up the account-qualified key first, then the bare one.
        qualified = [f".{host}", f".{account}"] if host else [f".{named}"] if named else []
        for suffix in [*qualified, ""]:
            v = conf.get(stem + suffix)
            if v:
                return v
        return None

    if account:
        opts["account_name"] = account
    # ABFS's fs.azure.account.auth.type, when set, decides (refused here if it cannot run)
    chosen = _azure_auth_type(conf, pick)
    dfs_endpoint = _abfs_endpoint(conf, location, account)
    endpoint = conf.get(AZURE_BLOB_ENDPOINT_KEY) or dfs_endpoint
    if endpoint:
        # An emulator or private endpoint: account name from its path, a connection string so
        # that plain http is allowed.
        parts = urlsplit(endpoint)
        acct = parts.path.strip("/").split("/")[0] or account
        if not acct:
            raise ConfigError(f"{AZURE_BLOB_ENDPOINT_KEY} must name the account in its path")
        dfs = {"committer_dfs_endpoint": dfs_endpoint} if dfs_endpoint else {}
        if chosen is not None and OAUTH_PROVIDER_OPTION in chosen:
            # the token authorises the requests; the connection string only names the endpoint
            return {"connection_string": (
                f"DefaultEndpointsProtocol={parts.scheme or 'http'};AccountName={acct};"
                f"BlobEndpoint={endpoint.rstrip('/')};"), **dfs, **chosen}
        key = conf.get(f"fs.azure.account.key.{acct}") or pick("fs.azure.account.key")
        if key is None:
            named = AZURE_BLOB_ENDPOINT_KEY if conf.get(AZURE_BLOB_ENDPOINT_KEY) \
                else ABFS_ENDPOINT_KEY
            raise ConfigError(f"{named} needs fs.azure.account.key.<account>")
        register_secret(key)
        opts = {"connection_string": (
            f"DefaultEndpointsProtocol={parts.scheme or 'http'};AccountName={acct};"
            f"AccountKey={key};BlobEndpoint={endpoint.rstrip('/')};"), **dfs}
        register_secret(opts["connection_string"])
        return opts
    if chosen is not None:
        return opts | chosen
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


# -- the auth types of Hadoop's connectors -------------------------------------------------------
# Key names as in hadoop-azure's ConfigurationKeys / AuthConfigurations and the GCS connector's
# CONFIGURATION.md (v3) and HadoopCredentialsConfiguration (v2); docs/stores.md has the table.

def _abfs_endpoint(conf: Mapping[str, str], location: str, account: str | None) -> str | None:
    """The Data Lake endpoint ABFS reaches for ``location`` under ``fs.azure.abfs.endpoint``
    (``host:port``; ABFS ignores a value without a port, and so does this), else None."""
    value = conf.get(ABFS_ENDPOINT_KEY, "").strip()
    if ":" not in value or not account:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{ABFS_ENDPOINT_KEY} must be host:port, got {value!r}")
    scheme, _ = split_scheme(location)
    secure = scheme == "abfss" or conf.get(ABFS_ALWAYS_HTTPS_KEY, "true").strip().lower() \
        != "false"
    return f"{'https' if secure else 'http'}://{host}:{port}/{account}"


OAUTH_PROVIDER_OPTION = "committer_oauth_provider"
AZURE_AUTH_TYPE_KEY = "fs.azure.account.auth.type"
AZURE_OAUTH_PROVIDER_KEY = "fs.azure.account.oauth.provider.type"
_ABFS_OAUTH2 = "org.apache.hadoop.fs.azurebfs.oauth2."
# ABFS's token providers that run here, by class name -> committer_oauth_provider
_ABFS_PROVIDERS = {
    "ClientCredsTokenProvider": "client_credentials",
    "UserPasswordTokenProvider": "client_credentials",  # ABFS sends the same grant
    "MsiTokenProvider": "msi",
    "WorkloadIdentityTokenProvider": "workload_identity",
    "RefreshTokenBasedTokenProvider": "refresh_token",
}
_MSI_ENDPOINT = "http://169.254.169.254/metadata/identity/oauth2/token"
_AUTHORITY = "https://login.microsoftonline.com/"
_REFRESH_ENDPOINT = "https://login.microsoftonline.com/Common/oauth2/token"
_TOKEN_FILE = "/var/run/secrets/azure/tokens/azure-identity-token"
_USE_INSTEAD = ("use SharedKey (fs.azure.account.key), a fixed SAS (fs.azure.sas.fixed.token) "
                "or one of ABFS's OAuth providers: " + ", ".join(_ABFS_PROVIDERS))


def _jvm_class(key: str, value: str, what: str) -> ConfigError:
    return ConfigError(f"{key}={value}: {what} is a JVM class, which the Python job-commit "
                       f"engine cannot run; {_USE_INSTEAD}")


def _azure_auth_type(conf: Mapping[str, str],
                     pick: Callable[[str], str | None]) -> dict[str, Any] | None:
    """Storage options of ABFS's ``fs.azure.account.auth.type`` (None: not set, the keys
    present decide as before), or a ``ConfigError`` naming the key that cannot be used."""
    if (pick("fs.azure.enable.delegation.token") or "").strip().lower() == "true":
        raise ConfigError("fs.azure.enable.delegation.token=true: ABFS delegation tokens come "
                          "from a JVM token manager (fs.azure.delegation.token.provider.type) "
                          f"that the Python engine cannot run; {_USE_INSTEAD}")
    raw = pick(AZURE_AUTH_TYPE_KEY)
    if raw is None:
        return None
    kind = raw.strip().lower()

    def need(key: str) -> str:
        value = pick(key)
        if not value:
            raise ConfigError(f"{AZURE_AUTH_TYPE_KEY}={raw} needs {key} (or {key}.<account>"
                              ".dfs.core.windows.net)")
        return value

    if kind == "sharedkey":
        provider = pick("fs.azure.account.keyprovider")
        if provider:
            raise _jvm_class("fs.azure.account.keyprovider", provider, "a key provider")
        key = need("fs.azure.account.key")
        register_secret(key)
        return {"account_key": key}
    if kind == "sas":
        provider = pick("fs.azure.sas.token.provider.type")
        if provider:  # ABFS prefers it over a fixed token, so it cannot just be skipped
            raise _jvm_class("fs.azure.sas.token.provider.type", provider,
                             "a SAS token provider")
        sas = need("fs.azure.sas.fixed.token")
        register_secret(sas)
        return {"sas_token": sas}
    if kind == "custom":
        cls = pick(AZURE_OAUTH_PROVIDER_KEY) or "(not set)"
        raise _jvm_class(f"{AZURE_AUTH_TYPE_KEY}=Custom with {AZURE_OAUTH_PROVIDER_KEY}", cls,
                         "a custom token provider (CustomTokenProviderAdaptee)")
    if kind != "oauth":
        raise ConfigError(f"{AZURE_AUTH_TYPE_KEY}={raw}: expected SharedKey, SAS, OAuth or "
                          "Custom")
    cls = need(AZURE_OAUTH_PROVIDER_KEY).strip()
    name = cls.removeprefix(_ABFS_OAUTH2)
    provider = _ABFS_PROVIDERS.get(name)
    if provider is None or ("." in cls and not cls.startswith(_ABFS_OAUTH2)):
        raise _jvm_class(AZURE_OAUTH_PROVIDER_KEY, cls, "this token provider")
    out: dict[str, Any] = {OAUTH_PROVIDER_OPTION: provider}
    if name == "ClientCredsTokenProvider":
        out |= {"committer_oauth_endpoint": need("fs.azure.account.oauth2.client.endpoint"),
                "committer_oauth_client_id": need("fs.azure.account.oauth2.client.id"),
                "committer_oauth_client_secret": need("fs.azure.account.oauth2.client.secret")}
    elif name == "UserPasswordTokenProvider":
        out |= {"committer_oauth_endpoint": need("fs.azure.account.oauth2.client.endpoint"),
                "committer_oauth_client_id": need("fs.azure.account.oauth2.user.name"),
                "committer_oauth_client_secret": need("fs.azure.account.oauth2.user.password")}
    elif name == "MsiTokenProvider":
        out |= {"committer_oauth_endpoint":
                    pick("fs.azure.account.oauth2.msi.endpoint") or _MSI_ENDPOINT,
                "committer_oauth_client_id": pick("fs.azure.account.oauth2.client.id") or "",
                "committer_oauth_tenant": pick("fs.azure.account.oauth2.msi.tenant") or "",
                "committer_oauth_authority": _slash(
                    pick("fs.azure.account.oauth2.msi.authority") or _AUTHORITY)}
    elif name == "WorkloadIdentityTokenProvider":
        assertion = pick("fs.azure.account.oauth2.client.assertion.provider.type")
        if assertion:
            raise _jvm_class("fs.azure.account.oauth2.client.assertion.provider.type",
                             assertion, "a client assertion provider")
        authority = _slash(pick("fs.azure.account.oauth2.msi.authority") or _AUTHORITY)
        tenant = need("fs.azure.account.oauth2.msi.tenant")
        out |= {"committer_oauth_endpoint": f"{authority}{tenant}/oauth2/v2.0/token",
                "committer_oauth_client_id": need("fs.azure.account.oauth2.client.id"),
                "committer_oauth_token_file":
                    pick("fs.azure.account.oauth2.token.file") or _TOKEN_FILE}
    else:  # RefreshTokenBasedTokenProvider
        out |= {"committer_oauth_endpoint":
                    pick("fs.azure.account.oauth2.refresh.token.endpoint")
                    or pick("fs.azure.account.oauth2.refresh.endpoint") or _REFRESH_ENDPOINT,
                "committer_oauth_client_id": need("fs.azure.account.oauth2.client.id"),
                "committer_oauth_refresh_token": need("fs.azure.account.oauth2.refresh.token")}
    for name_, value in out.items():
        if isinstance(value, str) and is_secret_name(name_) and value:
            register_secret(value)
    return out


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _check_keyfile(path: str) -> None:
    # gcsfs takes a string that is not an existing file for a raw access token: a mistyped
    # path would become a bogus bearer token and a 401 at the first request
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ConfigError(f"the GCS service-account key file {path} (fs.gs.auth.service."
                          f"account.json.keyfile) cannot be read: {e.strerror or e}") from None


def _gcs_auth(conf: Mapping[str, str], keyfile: str | None) -> Any:
    """gcsfs's ``token`` for the GCS connector's auth keys (None: none set, as before), or a
    ``ConfigError`` naming the key that cannot be used here."""
    def first(*keys: str) -> tuple[str, str] | None:
        return next(((k, conf[k]) for k in keys if conf.get(k)), None)

    use = ("use fs.gs.auth.type=SERVICE_ACCOUNT_JSON_KEYFILE with fs.gs.auth.service.account."
           "json.keyfile, APPLICATION_DEFAULT, COMPUTE_ENGINE, USER_CREDENTIALS or "
           "UNAUTHENTICATED")
    for key in conf:
        if key.startswith(("fs.gs.auth.impersonation.service.account",
                           "google.cloud.auth.impersonation.service.account")):
            raise ConfigError(f"{key}: service-account impersonation is not supported by the "
                              f"Python engine; give the impersonated account's credentials "
                              f"instead ({use})")
    auth_type = (conf.get("fs.gs.auth.type") or "").strip().upper()
    provider = first("fs.gs.auth.access.token.provider", "fs.gs.auth.access.token.provider.impl",
                     "google.cloud.auth.access.token.provider.impl")
    if provider and auth_type in ("", "ACCESS_TOKEN_PROVIDER"):
        raise ConfigError(f"{provider[0]}={provider[1]}: an access token provider is a JVM "
                          f"class, which the Python job-commit engine cannot run; {use}")
    if auth_type == "ACCESS_TOKEN_PROVIDER":
        raise ConfigError("fs.gs.auth.type=ACCESS_TOKEN_PROVIDER needs a JVM class "
                          f"(fs.gs.auth.access.token.provider) that the Python engine cannot "
                          f"run; {use}")
    if auth_type == "SERVICE_ACCOUNT_JSON_KEYFILE":
        if not keyfile:
            raise ConfigError("fs.gs.auth.type=SERVICE_ACCOUNT_JSON_KEYFILE needs "
                              "fs.gs.auth.service.account.json.keyfile")
        return keyfile
    if auth_type == "APPLICATION_DEFAULT":
        return "google_default"
    if auth_type == "COMPUTE_ENGINE":
        return "cloud"
    if auth_type == "UNAUTHENTICATED":
        return "anon"
    if auth_type == "USER_CREDENTIALS":
        info = {"type": "authorized_user"}
        for field in ("client.id", "client.secret", "refresh.token"):
            value = conf.get(f"fs.gs.auth.{field}")
            if not value:
                raise ConfigError(f"fs.gs.auth.type=USER_CREDENTIALS needs fs.gs.auth.{field}")
            info[field.replace(".", "_")] = value
        register_secret(info["client_secret"])
        register_secret(info["refresh_token"])
        server = conf.get("fs.gs.token.server.url")
        if server:
            info["token_uri"] = _slash(server) + "token"
        return info
    if auth_type:
        raise ConfigError(f"fs.gs.auth.type={conf['fs.gs.auth.type']}: expected one of "
                          "ACCESS_TOKEN_PROVIDER, APPLICATION_DEFAULT, COMPUTE_ENGINE, "
                          "SERVICE_ACCOUNT_JSON_KEYFILE, UNAUTHENTICATED, USER_CREDENTIALS")
    # the connector's v2 keys (prefixes fs.gs and google.cloud)
    p12 = first("fs.gs.auth.service.account.keyfile", "google.cloud.auth.service.account.keyfile")
    if p12 and not keyfile:
        raise ConfigError(f"{p12[0]}: a PKCS12 key is not supported by the Python engine; use "
                          "the account's JSON key file (fs.gs.auth.service.account.json.keyfile)")
    inline = first("fs.gs.auth.service.account.private.key",
                   "google.cloud.auth.service.account.private.key")
    if inline and not keyfile:
        register_secret(inline[1])
        raise ConfigError(f"{inline[0]}: a private key given inline is not supported by the "
                          "Python engine; use the account's JSON key file "
                          "(fs.gs.auth.service.account.json.keyfile)")
    null = first("fs.gs.auth.null.enable", "google.cloud.auth.null.enable")
    if null and null[1].strip().lower() == "true" and not keyfile:
        return "anon"
    enabled = first("fs.gs.auth.service.account.enable", "google.cloud.auth.service.account.enable")
    if enabled and enabled[1].strip().lower() == "false":
        raise ConfigError(f"{enabled[0]}=false selects the installed-application flow "
                          "(fs.gs.auth.client.id / client.secret), which the Python engine does "
                          f"not support; {use}")
    return None


def _gcs_options(conf: Mapping[str, str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    keyfile = conf.get("google.cloud.auth.service.account.json.keyfile") or conf.get(
        "fs.gs.auth.service.account.json.keyfile")
    if keyfile:
        _check_keyfile(keyfile)
        opts["token"] = keyfile  # gcsfs reads the JSON key file at this path
    # the connector's fs.gs.auth.type (and its v2 keys), when set, decide
    token = _gcs_auth(conf, keyfile)
    if token is not None:
        opts["token"] = token
    root = conf.get("fs.gs.storage.root.url")
    if root:
        opts["endpoint_url"] = root.rstrip("/")
        if "token" not in opts:
            opts["token"] = "anon"  # emulators take unauthenticated requests
    project = conf.get("fs.gs.project.id")
    if project:
        opts["project"] = project
    return opts


# The proxy keys a Spark user already sets: the GCS connector's own, and the JVM's system
# properties that ABFS (and the GCS connector's default transport) follow, which the shim
# forwards (EngineClient.FORWARDED_PROPERTIES). They become the http transport's options
# (committer/store/http/transport.py); an explicit storage option wins.
GCS_PROXY_ADDRESS_KEY = "fs.gs.proxy.address"
GCS_PROXY_USERNAME_KEY = "fs.gs.proxy.username"
GCS_PROXY_PASSWORD_KEY = "fs.gs.proxy.password"
JVM_PROXY_HOST_KEY = "https.proxyHost"
JVM_PROXY_PORT_KEY = "https.proxyPort"
JVM_NON_PROXY_HOSTS_KEY = "http.nonProxyHosts"
#: what the JVM bypasses when http.nonProxyHosts is not set
JVM_DEFAULT_NON_PROXY_HOSTS = "localhost|127.*|[::1]"


def _proxy_options(conf: Mapping[str, str], scheme: str) -> dict[str, Any]:
    """``committer_proxy*`` options from the GCS connector's proxy keys (a ``gs`` location)
    or else the JVM's ``https.proxyHost`` / ``https.proxyPort`` / ``http.nonProxyHosts``."""
    address = conf.get(GCS_PROXY_ADDRESS_KEY, "").strip() if scheme in GCS_SCHEMES else ""
    if address:
        if re.search(r":\d+/?$", address) is None:
            raise ConfigError(f"{GCS_PROXY_ADDRESS_KEY} must be host:port, got {address!r}")
        user = conf.get(GCS_PROXY_USERNAME_KEY)
        password = conf.get(GCS_PROXY_PASSWORD_KEY)
        if (user is None) != (password is None):
            raise ConfigError(f"{GCS_PROXY_USERNAME_KEY} and {GCS_PROXY_PASSWORD_KEY} go "
                              "together (the GCS connector takes both or neither)")
        out: dict[str, Any] = {"committer_proxy": address}
        if user is not None and password is not None:
            register_secret(password)
            out["committer_proxy_username"] = user
            out["committer_proxy_password"] = password
        return out
    host = conf.get(JVM_PROXY_HOST_KEY, "").strip()
    if not host:
        return {}
    port = conf.get(JVM_PROXY_PORT_KEY, "443").strip() or "443"  # the JVM's default
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{JVM_PROXY_PORT_KEY}: expected a port number, got {port!r}")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    non_proxy = conf.get(JVM_NON_PROXY_HOSTS_KEY, JVM_DEFAULT_NON_PROXY_HOSTS)
    # Java's list: '|'-separated, '*' a wildcard at either end; the transport's: ','-separated
    return {"committer_proxy": f"http://{host}:{port}",
            "committer_no_proxy": ",".join(p.strip() for p in non_proxy.split("|") if p.strip())}


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
    if scheme in AZURE_SCHEMES | GCS_SCHEMES:
        opts.update(_proxy_options(flat, scheme))
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
    win) and, for Azure, ``fs.azure.io.rate.limit`` as the store rate limit when it is set and
    the committer's own ``io.rate.limit`` was not. Hadoop's default for that key (1,000/s,
    for a client that cannot adapt) is not taken: with neither set the store's default cap
    applies (``config.DEFAULT_CLOUD_RATE_LIMIT``), under the limit that backs off on 503s."""
    flat = _strip(conf)
    options = storage_options_from_hadoop(flat, location)
    options.update(config.storage_options)
    register_options(options)
    changes: dict[str, Any] = {"storage_options": options}
    scheme, _ = split_scheme(location)
    raw = flat.get(AZURE_RATE_LIMIT_KEY)
    if (scheme in AZURE_SCHEMES and raw is not None and OUR_RATE_LIMIT_KEY not in flat
            and config.io_rate_limit is None):
        try:
            changes["io_rate_limit"] = int(raw)
        except ValueError:
            raise ConfigError(f"{AZURE_RATE_LIMIT_KEY}: expected an integer, got {raw!r}") from None
    return dataclasses.replace(config, **changes)
