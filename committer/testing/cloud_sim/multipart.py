"""MIME multipart bodies: batch requests and answers (Blob Batch, the GCS batch endpoint) and
GCS multipart uploads.

A batch is ``multipart/mixed``: each part has its own MIME headers (``Content-Type:
application/http``, ``Content-ID``), a blank line, then a whole HTTP request (request line,
headers, blank line, body). Per RFC 2046 the CRLF before a delimiter belongs to the delimiter,
so a client must end a sub-request's head with one more CRLF than it would on a connection;
this parser also takes a sub-request whose head runs to the end of its part without that blank
line (fake-gcs-server answers such a part 400; the Azure SDK and the GCS clients send the
blank line). The target of a sub-request may be a path or an absolute URL (its path is used).

Line breaks may be bare LF instead of CRLF, as the service takes them: gcsfs writes its
uploads and batches with ``\n`` alone. A message's convention is read from its first delimiter
line, and the line break taken off a part's end as belonging to the next delimiter is that one
(so media ending in ``\r`` or ``\n`` keeps its bytes); in such a message header lines and the
blank line ending a head may use either. A CRLF message is read by CRLF alone.

Answers are serialised the way Azurite and fake-gcs-server lay them out: per part the MIME
headers, a blank line, the status line and headers, a blank line, the body (if any), and then
the next delimiter.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MultipartError", "SubRequest", "SubResponse", "boundary_of", "parse_batch",
           "parse_related", "render_batch", "split_parts"]


class MultipartError(ValueError):
    """A body that is not the multipart message it should be."""


class SubRequest:
    """One request of a batch. ``path`` and ``raw_query`` as sent; header names lower-case."""

    __slots__ = ("body", "content_id", "headers", "method", "path", "raw_query", "target")

    def __init__(self, content_id: str, method: str, target: str, headers: dict[str, str],
                 body: bytes) -> None:
        self.content_id = content_id
        self.method = method
        self.target = target
        if "://" in target:  # an absolute URL: its path and query
            rest = target.split("://", 1)[1]
            slash = rest.find("/")
            target = rest[slash:] if slash >= 0 else "/"
        path, _, query = target.partition("?")
        self.path = path
        self.raw_query = query
        self.headers = headers
        self.body = body


class SubResponse:
    """One part of a batch's answer."""

    __slots__ = ("body", "content_id", "head", "reason", "status")

    def __init__(self, content_id: str, status: int, reason: str, head: str = "",
                 body: bytes = b"") -> None:
        self.content_id = content_id
        self.status = status
        self.reason = reason
        self.head = head  # "Name: value\r\n" lines
        self.body = body


def boundary_of(content_type: str) -> str:
    """The ``boundary`` parameter of a multipart content type."""
    kind, _, params = content_type.partition(";")
    if not kind.strip().lower().startswith("multipart/"):
        raise MultipartError(f"not a multipart content type: {content_type[:200]!r}")
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary":
            value = value.strip().strip('"')
            if value:
                return value
    raise MultipartError(f"no boundary in Content-Type {content_type[:200]!r}")


def split_parts(body: bytes, boundary: str) -> list[bytes]:
    """The contents of the parts (MIME headers included), between the delimiters."""
    return _split(body, boundary)[0]


def _split(body: bytes, boundary: str) -> tuple[list[bytes], bool]:
    """The parts, and whether the message breaks its lines with CRLF (else LF alone)."""
    delimiter = b"--" + boundary.encode("latin-1")
    pieces = body.split(delimiter)
    if len(pieces) < 2:
        raise MultipartError("the body holds no part (no delimiter)")
    out = []
    closed = False
    newline = b"\r\n"
    for index, piece in enumerate(pieces[1:]):
        if piece.startswith(b"--"):
            closed = True
            break
        eol = piece.find(b"\n")  # the rest of the delimiter line (transport padding)
        if eol < 0:
            raise MultipartError("a delimiter line does not end")
        if index == 0 and (eol == 0 or piece[eol - 1] != 0x0D):
            newline = b"\n"
        content = piece[eol + 1:]
        if content.endswith(newline):  # this line break belongs to the next delimiter
            content = content[:-len(newline)]
        out.append(content)
    if not closed:
        raise MultipartError("the body has no closing delimiter")
    return out, newline == b"\r\n"


def _head_end(data: bytes, crlf: bool) -> tuple[int, int]:
    """Where the blank line ending a head starts, and how long the break is; (-1, 0): none.
    In a message of LF line breaks, the first blank line of either kind."""
    if crlf:
        return data.find(b"\r\n\r\n"), 4
    crlf_at, lf_at = data.find(b"\r\n\r\n"), data.find(b"\n\n")
    if lf_at >= 0 and (crlf_at < 0 or lf_at < crlf_at):
        return lf_at, 2
    return (crlf_at, 4) if crlf_at >= 0 else (-1, 0)


def _lines(text: str, crlf: bool) -> list[str]:
    if crlf:
        return text.split("\r\n")
    return [line.removesuffix("\r") for line in text.split("\n")]


def _headers(lines: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise MultipartError(f"malformed header line {line[:200]!r}")
        out[name.strip().lower()] = value.strip()
    return out


def _split_head(content: bytes, crlf: bool) -> tuple[dict[str, str], bytes]:
    if content.startswith(b"\r\n"):  # no headers
        return {}, content[2:]
    if not crlf and content.startswith(b"\n"):
        return {}, content[1:]
    end, width = _head_end(content, crlf)
    if end < 0:
        return _headers(_lines(content.decode("latin-1"), crlf)), b""
    return _headers(_lines(content[:end].decode("latin-1"), crlf)), content[end + width:]


def parse_batch(body: bytes, content_type: str, *, limit: int) -> list[SubRequest]:
    """The sub-requests of a batch, in order; at most ``limit`` of them."""
    parts, crlf = _split(body, boundary_of(content_type))
    if not parts:
        raise MultipartError("the batch holds no sub-request")
    if len(parts) > limit:
        raise MultipartError(f"the batch holds {len(parts)} sub-requests; at most {limit}")
    out = []
    for index, content in enumerate(parts):
        mime, http = _split_head(content, crlf)
        if not http:
            raise MultipartError(f"part {index} holds no HTTP request")
        end, width = _head_end(http, crlf)
        if end < 0:  # the head runs to the end of the part (no blank line): take it
            head_text, sub_body = http.rstrip(b"\r\n").decode("latin-1"), b""
        else:
            head_text, sub_body = http[:end].decode("latin-1"), http[end + width:]
        lines = _lines(head_text, crlf)
        request_line = lines[0].split(" ")
        if len(request_line) != 3 or not request_line[2].startswith("HTTP/"):
            raise MultipartError(f"part {index} holds no HTTP request line: {lines[0][:200]!r}")
        headers = _headers(lines[1:])
        length = headers.get("content-length")
        if length is not None and length.isdigit():
            sub_body = sub_body[:int(length)]
        out.append(SubRequest(mime.get("content-id", ""), request_line[0], request_line[1],
                              headers, sub_body))
    return out


def render_batch(boundary: str, parts: Sequence[SubResponse]) -> bytes:
    """The body of a batch's answer."""
    out = []
    for p in parts:
        cid = f"Content-ID: {p.content_id}\r\n" if p.content_id else ""
        out.append(f"--{boundary}\r\nContent-Type: application/http\r\n{cid}\r\n"
                   f"HTTP/1.1 {p.status} {p.reason}\r\n{p.head}\r\n".encode("latin-1", "replace"))
        if p.body:
            out.append(p.body)
        out.append(b"\r\n")
    out.append(f"--{boundary}--\r\n".encode("latin-1"))
    return b"".join(out)


def parse_related(body: bytes, content_type: str) -> tuple[bytes, str | None, bytes]:
    """A GCS multipart upload (``multipart/related``): ``(metadata JSON, the media part's
    content type, media)``."""
    parts, crlf = _split(body, boundary_of(content_type))
    if len(parts) != 2:
        raise MultipartError(f"a multipart upload has 2 parts (metadata, media), not "
                             f"{len(parts)}")
    _, metadata = _split_head(parts[0], crlf)
    media_headers, media = _split_head(parts[1], crlf)
    return metadata, media_headers.get("content-type"), media
