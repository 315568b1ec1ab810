"""The values a request and its answer are made of: where it goes (:class:`Origin`), the
answer (:class:`Response`, its headers found in the text they arrived in), and the one failure
an answer's size can raise (:class:`BodyTooLarge`), the one a malformed answer raises
(:class:`BadAnswer`), and the client's ``User-Agent``.

Kept apart from ``connection.py`` (the pool and the parser of answers as bytes arrive), so that
backends and batch parsing need only these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["USER_AGENT", "BadAnswer", "BodyTooLarge", "Origin", "Response", "find_header"]


def _user_agent() -> str:
    """``spark-manifest-committer/<version>``: a service's logs (and a support ticket) can
    tell this client's requests from others'. The version is the installed package's, else
    the one the source declares (a checkout run without installing)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"spark-manifest-committer/{version('spark-manifest-committer')}"
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover - importlib.metadata is in every supported Python
        pass
    from committer import __version__

    return f"spark-manifest-committer/{__version__}"


#: the ``User-Agent`` of every request of the client
USER_AGENT = _user_agent()


class BadAnswer(ConnectionError):
    """The answer broke HTTP/1.1's grammar or framing (a malformed status line or header, a
    broken chunk, a head too long): the connection is dropped and, as with a reset, the
    request's outcome is unknown. A ``ConnectionError``, so the backends treat it as the
    transient failure it is (``TransientStoreError``)."""


class BodyTooLarge(Exception):
    """The answer announced a body larger than the request allowed (``max_body``)."""

    def __init__(self, length: int, limit: int) -> None:
        self.length = length
        self.limit = limit
        super().__init__(f"answer of {length} bytes exceeds the limit of {limit}")


class Response:
    """One answer: status, reason, headers, body. Read-only once made.

    The headers are kept as the text they arrived in: most answers are looked at for one or
    two headers (an error code, an etag), and splitting twenty of them into a dictionary per
    answer would cost more than the rest of the answer's handling. :meth:`header` finds one
    in the text; :attr:`headers` builds the whole mapping (names lower-case, repeated ones
    joined by ", ") the first time it is asked for.

    ``request_id``: the id the client gave the request this answers (Azure's
    ``x-ms-client-request-id``), set by the backend that sent it, for its error messages.
    ``wire_s``: seconds from the request's writing on its connection to its whole answer (set
    by the pool: no wait for a place, a connection or its opening in it; ``None`` unknown)."""

    __slots__ = ("_dict", "_head", "_lower", "body", "reason", "request_id", "status", "wire_s")

    def __init__(self, status: int, reason: str, headers: str | Mapping[str, str],
                 body: bytes) -> None:
        self.status = status
        self.request_id = ""
        self.wire_s: float | None = None
        self.reason = reason
        self.body = body
        self._lower: str | None = None
        if isinstance(headers, str):
            # the header lines, each after a CRLF, as they arrived
            self._head: str = headers
            self._dict: dict[str, str] | None = None
        else:
            self._head = ""
            self._dict = {k.lower(): v for k, v in headers.items()}

    def header(self, name: str, default: str = "") -> str:
        """The value of header ``name`` (lower-case), or ``default``; of a repeated header,
        the first."""
        if self._dict is not None:
            return self._dict.get(name, default)
        return find_header(self._head, self._lowered(), name, default)

    def _lowered(self) -> str:
        if self._lower is None:
            self._lower = self._head.lower()
        return self._lower

    @property
    def headers(self) -> Mapping[str, str]:
        if self._dict is None:
            out: dict[str, str] = {}
            for line in self._head.split("\r\n"):
                name, sep, value = line.partition(":")
                if not sep:
                    continue
                key, value = name.strip().lower(), value.strip()
                out[key] = f"{out[key]}, {value}" if key in out else value
            self._dict = out
        return self._dict

    def __repr__(self) -> str:
        return f"Response({self.status} {self.reason!r}, {len(self.body)} bytes)"


def find_header(head: str, lower: str, name: str, default: str = "") -> str:
    """A header's value in ``head`` (header lines each after a CRLF; ``lower`` is
    ``head.lower()``), found by a search, not by splitting every line."""
    at = lower.find(f"\r\n{name}:")
    if at < 0:
        return default
    start = at + len(name) + 3
    end = head.find("\r\n", start)
    return (head[start:] if end < 0 else head[start:end]).strip()


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a pool connects: ``http://127.0.0.1:10000`` or ``https://acct.blob.core...``."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        scheme = (parts.scheme or "https").lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {url}")
        if not parts.hostname:
            raise ValueError(f"no host in URL: {url}")
        port = parts.port or (443 if scheme == "https" else 80)
        return cls(scheme, parts.hostname, port)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"
