"""How a pool reaches its origin: directly or through an HTTP proxy, and which certificates it
trusts.

Read once when a store is opened (:meth:`Transport.resolve`), from the store's options and the
environment, so that a bad value is a ``ConfigError`` naming it before any request is sent:

- **proxy**: the storage option ``committer_proxy`` (``http://[user:password@]host:port``, or
  ``host:port``; empty or ``none``: no proxy, whatever the environment says), with
  ``committer_proxy_username`` / ``committer_proxy_password`` and ``committer_no_proxy``;
  else the environment as requests reads it: ``https_proxy`` / ``HTTPS_PROXY`` for an https
  origin, ``http_proxy`` / ``HTTP_PROXY`` for an http one (the upper-case one ignored in a CGI
  request, ``REQUEST_METHOD`` set), ``all_proxy`` / ``ALL_PROXY`` for either, the lower-case
  name first; ``no_proxy`` / ``NO_PROXY`` for the hosts that bypass it (:func:`bypasses`). An
  explicit proxy ignores the environment's ``NO_PROXY``, as requests does with a proxy it is
  given; localhost is not bypassed unless listed (requests and curl alike).
- **certificates**: verified, host name included, always. The CA bundle is the storage option
  ``committer_ca_bundle`` (a file or a directory of PEM certificates), else
  ``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE`` (each replaces the system's store, as in
  requests), else the system's store, where OpenSSL itself reads ``SSL_CERT_FILE`` /
  ``SSL_CERT_DIR``.

The pool (``connection.py``) tunnels an https origin through the proxy with ``CONNECT`` and
sends an http origin's requests to the proxy in absolute form (as curl and requests do), each
with ``Proxy-Authorization: Basic`` when credentials are configured. What cannot be cured by
trying again (a certificate that does not verify, a proxy that refuses the credentials or the
destination) is an :class:`EndpointRefusedError`, not a transient failure.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import functools
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from committer.errors import ConfigError, StoreError
from committer.store.http.messages import Origin

__all__ = ["CA_BUNDLE_OPTION", "NO_PROXY_OPTION", "PROXY_OPTION", "PROXY_PASSWORD_OPTION",
           "PROXY_USERNAME_OPTION", "EndpointRefusedError", "Proxy", "Transport", "bypasses",
           "connect", "parse_proxy", "refused_by_proxy"]

PROXY_OPTION = "committer_proxy"
PROXY_USERNAME_OPTION = "committer_proxy_username"
PROXY_PASSWORD_OPTION = "committer_proxy_password"
NO_PROXY_OPTION = "committer_no_proxy"
CA_BUNDLE_OPTION = "committer_ca_bundle"
OPTIONS = (PROXY_OPTION, PROXY_USERNAME_OPTION, PROXY_PASSWORD_OPTION, NO_PROXY_OPTION,
           CA_BUNDLE_OPTION)
_NO_PROXY_VALUES = frozenset({"", "none", "direct"})


class EndpointRefusedError(StoreError):
    """The endpoint cannot be used as configured, and trying again will not change that: its
    TLS certificate does not verify, or the proxy refused the credentials or the destination.
    ``path`` is the endpoint (or the proxy)."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy; ``source`` says where it was configured (an option or a variable)."""

    host: str
    port: int
    source: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``http://host:port``: never the credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def describe(self) -> str:
        """For messages: the proxy and where it was configured."""
        return f"proxy {self.url} (from {self.source})"

    @property
    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` value, if credentials are configured."""
        if self.username is None:
            return None
        raw = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


def parse_proxy(value: str, source: str) -> Proxy:
    """A proxy from ``http://[user:password@]host[:port]`` or ``host:port`` (no scheme means
    http, as in curl; no port means 80, as in requests)."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"{source}: not a proxy URL ({e})") from None
    if parts.scheme.lower() != "http":
        raise ConfigError(f"{source}: only http:// proxies are supported (https requests are "
                          f"tunnelled through them with CONNECT), got {parts.scheme}://")
    if not parts.hostname:
        raise ConfigError(f"{source}: the proxy URL names no host")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    if password:
        _register_secret(password)
    return Proxy(parts.hostname, port or 80, source, user, password)


def _register_secret(value: str) -> None:
    from committer.store.secrets import register_secret

    register_secret(value)


# -- NO_PROXY --------------------------------------------------------------------------------

def bypasses(no_proxy: str, host: str, port: int) -> bool:
    """Whether ``host:port`` bypasses the proxy by a ``NO_PROXY`` list: entries separated by
    commas (or spaces); ``*`` alone matches every host; a name matches itself and its
    subdomains (``example.com`` and ``.example.com`` both match ``a.example.com``, not
    ``notexample.com``, as in curl); an IP address or a CIDR block (``10.0.0.0/8``) matches
    addresses, as in requests; ``entry:port`` only that port; any other ``*`` is a wildcard
    (``127.*``, what Java's ``http.nonProxyHosts`` writes)."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.replace(" ", ",").split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        name, want_port = _entry_port(entry)
        if want_port is not None and want_port != port:
            continue
        name = name.strip("[]").rstrip(".")
        if address is not None:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
                continue
            except ValueError:
                pass
        if "*" in name.lstrip("*."):
            if fnmatch.fnmatchcase(host, name):
                return True
            continue
        name = name.lstrip("*").lstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _entry_port(entry: str) -> tuple[str, int | None]:
    """``host:port`` -> ``(host, port)``; a bare IPv6 address has no port."""
    if entry.startswith("["):
        end = entry.find("]")
        rest = entry[end + 1:]
        if rest.startswith(":") and rest[1:].isdigit():
            return entry[:end + 1], int(rest[1:])
        return entry, None
    name, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name, int(port)
    return entry, None


# -- TLS -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def _context(cafile: str | None, capath: str | None, _env: tuple[str, str]) -> ssl.SSLContext:
    # one context per bundle (loading a store of certificates costs milliseconds); ``_env``
    # keys the cache on the variables OpenSSL reads for the system store
    context = ssl.create_default_context(cafile=cafile, capath=capath)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


# -- the resolved transport ------------------------------------------------------------------

@dataclass(frozen=True)
class Transport:
    """How a store's pools connect: resolved once, at opening."""

    #: the explicit proxy (``committer_proxy``); with ``explicit`` set and this None: direct
    proxy: Proxy | None = None
    explicit: bool = False
    #: the environment's proxies, by origin scheme (``https``, ``http``)
    env_proxies: Mapping[str, Proxy] = field(default_factory=dict)
    no_proxy: str = ""
    no_proxy_source: str = ""
    ca_bundle: str | None = None
    ca_source: str = "the system's certificate store"

    @classmethod
    def resolve(cls, options: MutableMapping[str, Any],
                environ: Mapping[str, str] | None = None) -> Transport:
        """Take this module's options out of ``options`` (the rest goes to adlfs / gcsfs) and
        read the environment; a bad value is a ``ConfigError`` naming it."""
        env = os.environ if environ is None else environ
        raw = {name: options.pop(name, None) for name in OPTIONS}
        user, password = raw[PROXY_USERNAME_OPTION], raw[PROXY_PASSWORD_OPTION]
        if password:
            _register_secret(str(password))
        proxy: Proxy | None = None
        explicit = raw[PROXY_OPTION] is not None
        if explicit and str(raw[PROXY_OPTION]).strip().lower() not in _NO_PROXY_VALUES:
            proxy = parse_proxy(str(raw[PROXY_OPTION]), f"storage option {PROXY_OPTION}")
            if user is not None:
                proxy = Proxy(proxy.host, proxy.port, proxy.source, str(user),
                              None if password is None else str(password))
        elif (user is not None or password is not None) and not explicit:
            raise ConfigError(f"storage options {PROXY_USERNAME_OPTION} / "
                              f"{PROXY_PASSWORD_OPTION} need {PROXY_OPTION}")
        env_proxies: dict[str, Proxy] = {}
        if not explicit:
            for scheme in ("https", "http"):
                found = _env_proxy(env, scheme)
                if found is not None:
                    env_proxies[scheme] = parse_proxy(found[1], f"environment variable {found[0]}")
        if raw[NO_PROXY_OPTION] is not None:
            no_proxy, no_proxy_source = str(raw[NO_PROXY_OPTION]), NO_PROXY_OPTION
        elif not explicit:
            name = "no_proxy" if "no_proxy" in env else "NO_PROXY"
            no_proxy, no_proxy_source = env.get(name, ""), name
        else:
            no_proxy, no_proxy_source = "", ""
        ca_bundle, ca_source = None, "the system's certificate store"
        for name, value in ((f"storage option {CA_BUNDLE_OPTION}", raw[CA_BUNDLE_OPTION]),
                            ("REQUESTS_CA_BUNDLE", env.get("REQUESTS_CA_BUNDLE")),
                            ("CURL_CA_BUNDLE", env.get("CURL_CA_BUNDLE"))):
            if value:
                if not os.path.exists(str(value)):
                    raise ConfigError(f"{name}: no CA bundle at {value}")
                ca_bundle, ca_source = str(value), f"{value} (from {name})"
                break
        if ca_bundle is None and env.get("SSL_CERT_FILE"):
            ca_source = f"the system's store with SSL_CERT_FILE={env['SSL_CERT_FILE']}"
        transport = cls(proxy, explicit, env_proxies, no_proxy, no_proxy_source, ca_bundle,
                        ca_source)
        # A bundle this store's options name that is not PEM fails here, not at a request.
        # One from the environment (often set machine-wide) or the system's store is loaded
        # when the first https pool is made, which is also before anything moves: ~30 ms of
        # CPU that a store on http endpoints never needs.
        if raw[CA_BUNDLE_OPTION]:
            transport.ssl_context()
        return transport

    def proxy_for(self, origin: Origin) -> Proxy | None:
        """The proxy to reach ``origin`` through, or ``None`` for a direct connection."""
        proxy = self.proxy if self.explicit else self.env_proxies.get(origin.scheme)
        if proxy is None or (self.no_proxy and bypasses(self.no_proxy, origin.host, origin.port)):
            return None
        return proxy

    def ssl_context(self) -> ssl.SSLContext:
        """The context of https pools; a bundle that cannot be loaded is a ``ConfigError``."""
        cafile = capath = None
        if self.ca_bundle is not None:
            if os.path.isdir(self.ca_bundle):
                capath = self.ca_bundle
            else:
                cafile = self.ca_bundle
        env = (os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", ""))
        try:
            return _context(cafile, capath, env)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"cannot load the CA bundle {self.ca_source}: {e}") from None

    def pool_options(self, origin: Origin) -> dict[str, Any]:
        """The keyword arguments of ``ConnectionPool`` for ``origin``."""
        out: dict[str, Any] = {"proxy": self.proxy_for(origin), "ca_source": self.ca_source}
        if origin.scheme == "https":
            out["ssl_context"] = self.ssl_context()
        return out


def _env_proxy(env: Mapping[str, str], scheme: str) -> tuple[str, str] | None:
    """``(variable, value)`` of the environment's proxy for ``scheme`` origins."""
    names = [f"{scheme}_proxy"]
    # httpoxy: in a CGI request HTTP_PROXY may come from the client's "Proxy:" header
    if scheme != "http" or "REQUEST_METHOD" not in env:
        names.append(f"{scheme.upper()}_PROXY")
    names += ["all_proxy", "ALL_PROXY"]
    for name in names:
        value = env.get(name)
        if value:
            return name, value
    return None


# -- connecting ------------------------------------------------------------------------------

_MAX_CONNECT_ANSWER = 64 * 1024
P = TypeVar("P", bound=asyncio.Protocol)


def origin_url(origin: Origin) -> str:
    return f"{origin.scheme}://{origin.host_header}"


async def connect(loop: asyncio.AbstractEventLoop, factory: Callable[[], P], origin: Origin,
                  ssl_context: ssl.SSLContext | None, proxy: Proxy | None,
                  ca_source: str) -> P:
    """A connection to ``origin`` for the protocol ``factory`` makes: direct, to the proxy
    (an http origin: its requests are forwarded) or through a ``CONNECT`` tunnel (https).
    A certificate that does not verify is an :class:`EndpointRefusedError`; a proxy that
    cannot be reached an ``OSError`` naming it."""
    try:
        if proxy is None:
            _, conn = await loop.create_connection(
                factory, origin.host, origin.port, ssl=ssl_context,
                server_hostname=origin.host if ssl_context is not None else None)
            return conn
        if ssl_context is None:
            try:
                _, conn = await loop.create_connection(factory, proxy.host, proxy.port)
            except OSError as e:
                raise _unreachable(e, proxy, origin) from None
            return conn
        sock = await _tunnel(loop, proxy, origin)
        try:
            _, conn = await loop.create_connection(factory, sock=sock, ssl=ssl_context,
                                                   server_hostname=origin.host)
        except BaseException:
            sock.close()
            raise
        return conn
    except ssl.SSLCertVerificationError as e:
        url = origin_url(origin)
        via = f" (through {proxy.describe()})" if proxy is not None else ""
        raise EndpointRefusedError(
            f"TLS: the certificate of {url}{via} is not trusted: {e.verify_message or e}; "
            f"trusted: {ca_source} (a CA bundle is given by the storage option "
            f"{CA_BUNDLE_OPTION}, REQUESTS_CA_BUNDLE or SSL_CERT_FILE)", url) from None


def _unreachable(error: OSError, proxy: Proxy, origin: Origin) -> OSError:
    text = error.strerror or str(error) or type(error).__name__
    return type(error)(error.errno or 0, f"could not connect to {proxy.describe()} "
                       f"for {origin_url(origin)}: {text}")


async def _tunnel(loop: asyncio.AbstractEventLoop, proxy: Proxy,
                  origin: Origin) -> socket.socket:
    """A socket to ``proxy`` on which ``CONNECT`` to ``origin`` succeeded."""
    try:
        infos = await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise _unreachable(e, proxy, origin) from None
    sock: socket.socket | None = None
    last: OSError = ConnectionRefusedError("no address")
    for family, kind, proto, _, address in infos:
        candidate = socket.socket(family, kind, proto)
        candidate.setblocking(False)
        try:
            await loop.sock_connect(candidate, address)
        except OSError as e:
            candidate.close()
            last = e
            continue
        except BaseException:
            candidate.close()
            raise
        sock = candidate
        break
    if sock is None:
        raise _unreachable(last, proxy, origin)
    try:
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        authority = f"{host}:{origin.port}"
        auth = proxy.authorization
        head = (f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
                + (f"Proxy-Authorization: {auth}\r\n" if auth else "") + "\r\n")
        await loop.sock_sendall(sock, head.encode("latin-1"))
        data = b""
        while (end := data.find(b"\r\n\r\n")) < 0:
            chunk = await loop.sock_recv(sock, 4096)
            if not chunk:
                raise ConnectionResetError(f"{proxy.describe()} closed the connection before "
                                           f"answering CONNECT {authority}")
            data += chunk
            if len(data) > _MAX_CONNECT_ANSWER:
                raise ConnectionError(f"{proxy.describe()} sent an over-long answer to CONNECT")
        line = data[:data.find(b"\r\n")].decode("latin-1")
        parts = line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ConnectionError(f"{proxy.describe()} answered CONNECT {authority} with "
                                  f"{line[:100]!r}")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        if 200 <= status < 300:
            if len(data) > end + 4:  # nothing may come before our TLS handshake
                raise ConnectionError(f"{proxy.describe()} sent bytes after its answer to "
                                      f"CONNECT {authority}")
            return sock
        error = refused_by_proxy(proxy, origin, status, reason)
        if error is None:  # the proxy could not reach the origin (502, 503, 504): transient
            raise ConnectionError(f"{proxy.describe()} could not reach {origin_url(origin)}: "
                                  f"{status} {reason}".rstrip())
        raise error
    except BaseException:
        sock.close()
        raise


def refused_by_proxy(proxy: Proxy, origin: Origin, status: int,
                     reason: str) -> EndpointRefusedError | None:
    """What a proxy's error answer means: ``None`` for one that trying again may cure (502,
    503, 504: the origin was unreachable), else the error that names the proxy."""
    if status in (502, 503, 504):
        return None
    url = origin_url(origin)
    if status == 407:
        if proxy.username is None:
            text = (f"{proxy.describe()} asks for authentication (407) to reach {url}, and no "
                    "proxy credentials are configured (user:password in the proxy URL, the "
                    f"storage options {PROXY_USERNAME_OPTION} / {PROXY_PASSWORD_OPTION}, or "
                    "fs.gs.proxy.username / fs.gs.proxy.password)")
        else:
            text = (f"{proxy.describe()} refused the credentials of user {proxy.username!r} "
                    f"(407) to reach {url}")
        return EndpointRefusedError(text, proxy.url)
    return EndpointRefusedError(f"{proxy.describe()} refused to connect to {url}: "
                                f"{status} {reason}".rstrip(), proxy.url)
