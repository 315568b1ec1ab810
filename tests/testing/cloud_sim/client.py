"""A tiny HTTP client for the simulator's tests: raw requests, Azure ones signed with the
account key (Shared Key), one keep-alive connection per client."""

from __future__ import annotations

import http.client
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import orjson

from committer.testing.cloud_sim.shared_key import authorization
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

ACCOUNT = AZURITE_ACCOUNT
VERSION = "2025-11-05"


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def error_code(self) -> str | None:
        return self.headers.get("x-ms-error-code")


def http_date() -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())


def _pairs(query: str) -> list[tuple[str, str]]:
    out = []
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            out.append((unquote(name), unquote(value)))
    return out


class Client:
    """Requests to one port of the simulator (or an emulator)."""

    def __init__(self, port: int, *, key: str = AZURITE_KEY, sign: bool = True,
                 timeout: float = 30.0) -> None:
        self.port = port
        self.key = key
        self.sign = sign
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, target: str, *, headers: Mapping[str, str] | None = None,
                body: bytes = b"", sign: bool | None = None) -> Response:
        """``target`` is the path (percent-encoded) and query as sent."""
        h = {k.lower(): v for k, v in (headers or {}).items()}
        if sign if sign is not None else self.sign:
            h.setdefault("x-ms-date", http_date())
            h.setdefault("x-ms-version", VERSION)
            if body or method in ("PUT", "POST"):
                h.setdefault("content-length", str(len(body)))
            path, _, query = target.partition("?")
            h["authorization"] = authorization(ACCOUNT, self.key, method, path, _pairs(query), h)
        if self._conn is None:
            self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        conn = self._conn
        try:
            conn.request(method, target, body=body or None, headers=h)
            r = conn.getresponse()
            data = r.read()
        except (ConnectionError, http.client.HTTPException):
            self.close()
            raise
        headers_out = {k.lower(): v for k, v in r.getheaders()}
        if headers_out.get("connection", "").lower() == "close":
            self.close()
        return Response(r.status, r.reason, headers_out, data)


def blob_path(container: str, name: str = "") -> str:
    """``/<account>/<container>/<name>`` percent-encoded as the SDK does."""
    tail = "/" + quote(name, safe="/~") if name else ""
    return f"/{ACCOUNT}/{quote(container)}{tail}"


def gcs_object(bucket: str, name: str) -> str:
    return f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"


def batch_body(boundary: str, parts: Sequence[bytes], *, gcs: bool = False,
               blank_line: bool = True) -> bytes:
    """A multipart/mixed batch of whole HTTP requests."""
    out = []
    for i, part in enumerate(parts):
        cid = f"<{i}>" if gcs else str(i)
        out.append(f"--{boundary}\r\nContent-Type: application/http\r\n"
                   f"Content-Transfer-Encoding: binary\r\nContent-ID: {cid}\r\n\r\n".encode())
        out.append(part + (b"\r\n" if blank_line else b""))
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out)


def signed_delete(path: str, key: str = AZURITE_KEY) -> bytes:
    """A Blob Batch sub-request deleting ``path`` (as the SDK writes one)."""
    h = {"x-ms-date": http_date(), "content-length": "0"}
    auth = authorization(ACCOUNT, key, "DELETE", path, [], h)
    return (f"DELETE {path}? HTTP/1.1\r\nx-ms-date: {h['x-ms-date']}\r\n"
            f"Authorization: {auth}\r\nContent-Length: 0\r\n\r\n").encode()


def parse_batch_answer(content_type: str, body: bytes) -> list[tuple[dict[str, str], int,
                                                                    dict[str, str], bytes]]:
    """``(part headers, status, headers, body)`` of every part of a batch's answer."""
    boundary = content_type.split("boundary=", 1)[1].strip().strip('"')
    out = []
    for piece in body.split(b"--" + boundary.encode())[1:]:
        if piece.startswith(b"--"):
            break
        part = piece[2:]
        if part.endswith(b"\r\n"):
            part = part[:-2]
        mime_text, _, http_part = part.partition(b"\r\n\r\n")
        mime = {k.strip().lower(): v.strip() for k, _, v in
                (line.partition(":") for line in mime_text.decode().split("\r\n"))}
        head, _, payload = http_part.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:] if line)}
        out.append((mime, status, headers, payload))
    return out


def data_lake_file_system(connection_string: str, dfs_endpoint: str, name: str) -> Any:
    """The Azure Data Lake SDK's client of a new file system ``name`` on the simulated
    account, no retries. The SDK creates a file system on the Blob endpoint (on the service
    its account URL with .dfs. turned .blob.: not so for a path-style address), so it is
    created there first."""
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.storage.blob import BlobServiceClient
    from azure.storage.filedatalake import DataLakeServiceClient

    BlobServiceClient.from_connection_string(connection_string).create_container(name)
    service = DataLakeServiceClient(dfs_endpoint,
                                    credential=AzureNamedKeyCredential(ACCOUNT, AZURITE_KEY),
                                    retry_total=0)
    return service.get_file_system_client(name)
