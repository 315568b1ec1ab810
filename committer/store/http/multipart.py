"""Batch requests: many small requests in one ``multipart/mixed`` HTTP request.

Azure's Blob Batch (up to 256 sub-requests) and the GCS JSON API's batch endpoint (up to 100)
take the same shape: each part is ``Content-Type: application/http`` and an ``Content-ID``,
then a whole HTTP request; the answer is ``multipart/mixed`` with a part per sub-request, each
holding a whole HTTP response whose ``Content-ID`` names the sub-request it answers. A batch is
one request on the wire, so it saves the client a round trip, a connection slot and the
per-request work of each sub-request; the services still count every sub-request against the
account's rate.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from committer.store.http.messages import Response, find_header

__all__ = ["SubResponse", "batch_body", "new_boundary", "parse_batch_response"]


@dataclass(frozen=True, slots=True)
class SubResponse:
    """One sub-request's answer: its ``Content-ID`` (as the batch gave it, ``<`` ``>`` and a
    ``response-`` prefix removed) and the answer itself."""

    content_id: str
    response: Response

    @property
    def status(self) -> int:
        return self.response.status


def new_boundary(prefix: str = "batch_") -> str:
    return f"{prefix}{uuid.uuid4()}"


def batch_body(boundary: str, requests: Sequence[bytes], *, angle_ids: bool = False,
               binary: bool = True) -> bytes:
    """The body of a batch of ``requests`` (each a whole HTTP request: request line, headers,
    blank line, body), numbered 0.. in order; ``angle_ids`` writes ``Content-ID: <n>`` (GCS)
    instead of ``n`` (Azure)."""
    out: list[bytes] = []
    for i, req in enumerate(requests):
        cid = f"<{i}>" if angle_ids else str(i)
        head = (f"--{boundary}\r\nContent-Type: application/http\r\n"
                + ("Content-Transfer-Encoding: binary\r\n" if binary else "")
                + f"Content-ID: {cid}\r\n\r\n")
        out.append(head.encode("ascii"))
        out.append(req)
        # the CRLF before a boundary belongs to the boundary: a request that ends with its
        # blank line needs one more, or the parser sees its head unterminated
        out.append(b"\r\n")
    out.append(f"--{boundary}--\r\n".encode("ascii"))
    return b"".join(out)


def _boundary_of(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary":
            return value.strip().strip('"')
    raise ValueError(f"no boundary in Content-Type {content_type!r}")


def _content_id(raw: str) -> str:
    cid = raw.strip().strip("<>")
    return cid.removeprefix("response-")


def parse_batch_response(content_type: str, body: bytes) -> list[SubResponse]:
    """The sub-responses of a batch answer, in the order they appear."""
    delimiter = b"--" + _boundary_of(content_type).encode("ascii")
    out: list[SubResponse] = []
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break  # the closing delimiter
        part = chunk[2:] if chunk.startswith(b"\r\n") else chunk
        mime_end = part.find(b"\r\n\r\n")
        if mime_end < 0:
            raise ValueError("a batch part has no header end")
        mime = "\r\n" + part[:mime_end].decode("latin-1")
        content_id = find_header(mime, mime.lower(), "content-id")
        http = part[mime_end + 4:]
        head_end = http.find(b"\r\n\r\n")
        if head_end < 0:
            head_text, payload = http.rstrip(b"\r\n").decode("latin-1"), b""
        else:
            head_text, payload = http[:head_end].decode("latin-1"), http[head_end + 4:]
        line_end = head_text.find("\r\n")
        status_line = head_text if line_end < 0 else head_text[:line_end]
        status_parts = status_line.split(" ", 2)
        if len(status_parts) < 2 or not status_parts[0].startswith("HTTP/"):
            raise ValueError(f"a batch part holds no HTTP response: {status_line[:100]!r}")
        if payload.endswith(b"\r\n"):
            payload = payload[:-2]
        headers = "" if line_end < 0 else head_text[line_end:]
        reason = status_parts[2] if len(status_parts) > 2 else ""
        out.append(SubResponse(_content_id(content_id),
                               Response(int(status_parts[1]), reason, headers, payload)))
    return out
