"""Hadoop ``Path.toUri().toString()`` strings <-> locations the engine works with.

Manifests carry paths as Hadoop writes them: URI-escaped (a space is ``%20``, a literal ``%`` is
``%25``, ``#`` is ``%23``), non-ASCII letters left as they are, and local files as ``file:/x``
(Hadoop itself writes sources as ``file:///x`` and destinations as ``file:/x``: both must read the
same). A *location* is the unescaped form: an absolute OS path for local files, ``scheme://...``
for everything else. Decoding happens exactly once, here, so a Hive-escaped partition value such
as ``a=b%3Ac`` (written ``a=b%253Ac``) is never decoded twice.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

__all__ = ["is_local", "location_to_uri", "split_scheme", "uri_to_location"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
# Characters java.net.URI leaves unescaped in a path component (unreserved, punct, '/', '@').
_SAFE_ASCII = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789" "-_.!~*'()" ",;:$&+=" "/@"
)
# Non-ASCII characters java.net.URI escapes: controls, spaces, separators, private/surrogates.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cs"})
_ALL_SAFE = re.compile(r"^[A-Za-z0-9\-_.!~*'(),;:$&+=/@]*$")


def split_scheme(location: str) -> tuple[str, str]:
    """``("gs", "//bucket/key")`` for a URL, ``("", path)`` for a plain path."""
    m = _SCHEME.match(location)
    if m is None or len(m.group(1)) == 1:  # a one-letter "scheme" is a Windows drive, not a URL
        return "", location
    return m.group(1).lower(), location[m.end() :]


def is_local(location: str) -> bool:
    scheme, _ = split_scheme(location)
    return scheme in ("", "file")


def local_path(location: str) -> str:
    """``file:///x`` or ``file:/x`` -> ``/x``; plain paths unchanged."""
    if location.startswith("file:"):
        rest = location[5:]
        if rest.startswith("//"):  # file:///x or file://localhost/x
            rest = rest[2:]
            if rest.startswith("localhost/"):
                rest = rest[len("localhost") :]
        return rest
    return location


def _escape_char(ch: str) -> str:
    if ch in _SAFE_ASCII:
        return ch
    if ord(ch) > 0x7F and unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
        return ch  # java.net.URI keeps "other" characters as they are
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def escape_path(path: str) -> str:
    """Escape a path component the way ``java.net.URI``'s multi-argument constructor does."""
    if _ALL_SAFE.match(path):
        return path
    return "".join(_escape_char(c) for c in path)


def location_to_uri(location: str) -> str:
    """The Hadoop URI string for a location (``/a b`` -> ``file:/a%20b``)."""
    scheme, rest = split_scheme(location)
    if scheme in ("", "file"):
        path = rest
        if scheme == "file":
            path = _file_uri_path(rest, location)
        return "file:" + escape_path(path)
    if not rest.startswith("//"):
        return f"{scheme}:{escape_path(rest)}"
    slash = rest.find("/", 2)
    if slash < 0:
        return f"{scheme}:{rest}"
    return f"{scheme}:{rest[:slash]}{escape_path(rest[slash:])}"


def uri_to_location(uri: str) -> str:
    """The location for a Hadoop URI string (``file:/a%20b`` and ``file:///a%20b`` -> ``/a b``).

    Raises ``ValueError`` for a string that is no absolute URI or path.
    """
    if uri.startswith("file:/") and not uri.startswith("file://"):  # the common case, fast
        path = uri[5:]
        return unquote(path) if "%" in path else path
    scheme, rest = split_scheme(uri)
    if scheme == "":
        if not rest.startswith("/"):
            raise ValueError(f"not an absolute path or URI: {uri!r}")
        return rest
    if scheme == "file":
        path = _file_uri_path(rest, uri)
        return unquote(path) if "%" in path else path
    if not rest.startswith("//"):
        raise ValueError(f"URI has no authority: {uri!r}")
    if "%" not in rest:
        return f"{scheme}:{rest}"
    slash = rest.find("/", 2)
    if slash < 0:
        return f"{scheme}:{rest}"
    return f"{scheme}:{rest[:slash]}{unquote(rest[slash:])}"


def _file_uri_path(rest: str, original: str) -> str:
    if rest.startswith("///"):
        return rest[2:]
    if rest.startswith("//localhost/"):
        return rest[len("//localhost") :]
    if rest.startswith("//"):
        raise ValueError(f"file URI names a remote host: {original!r}")
    if not rest.startswith("/"):
        raise ValueError(f"file URI is not absolute: {original!r}")
    return rest
