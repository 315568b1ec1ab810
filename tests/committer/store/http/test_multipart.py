"""Batch bodies and answers in the shapes Azure's Blob Batch and the GCS batch endpoint use."""

from __future__ import annotations

import pytest

from committer.store.http.multipart import batch_body, new_boundary, parse_batch_response

# An answer as Azurite 3.37 gave it to the Azure SDK's batch of two deletes (chunked framing
# removed; request ids shortened).
AZURITE_ANSWER = (
    b"--batchresponse_8d81\r\nContent-Type: application/http\r\nContent-ID: 0\r\n\r\n"
    b"HTTP/1.1 202 Accepted\r\nServer: Azurite-Blob/3.37.0\r\nx-ms-request-id: ff8d\r\n"
    b"x-ms-delete-type-permanent: true\r\n\r\n"
    b"--batchresponse_8d81\r\nContent-Type: application/http\r\nContent-ID: 1\r\n\r\n"
    b"HTTP/1.1 404 The specified blob does not exist.\r\nx-ms-error-code: BlobNotFound\r\n"
    b"content-type: application/xml\r\n\r\n<?xml version=\"1.0\"?>\n<Error><Code>BlobNotFound"
    b"</Code></Error>\r\n--batchresponse_8d81--\r\n")
# fake-gcs-server's shape: <response-n> ids, 200 for a delete
GCS_ANSWER = (
    b"--33998d\r\nContent-Id: <response-0>\r\nContent-Type: application/http\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n\r\n"
    b"--33998d\r\nContent-Id: <response-1>\r\nContent-Type: application/http\r\n\r\n"
    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n{\"error\":{}}\r\n"
    b"--33998d--\r\n")


def test_azure_batch_answer() -> None:
    [first, second] = parse_batch_response(
        "multipart/mixed; boundary=batchresponse_8d81", AZURITE_ANSWER)
    assert (first.content_id, first.status) == ("0", 202)
    assert first.response.header("x-ms-delete-type-permanent") == "true"
    assert (second.content_id, second.status) == ("1", 404)
    assert second.response.header("x-ms-error-code") == "BlobNotFound"
    assert second.response.headers["content-type"] == "application/xml"
    assert second.response.body.endswith(b"</Error>")


def test_gcs_batch_answer() -> None:
    [first, second] = parse_batch_response('multipart/mixed; boundary="33998d"', GCS_ANSWER)
    assert (first.content_id, first.status, first.response.body) == ("0", 200, b"")
    assert (second.content_id, second.status, second.response.body) == ("1", 404,
                                                                      b'{"error":{}}')


def test_batch_body_shape() -> None:
    boundary = new_boundary()
    body = batch_body(boundary, [b"DELETE /c/a HTTP/1.1\r\nx: 1\r\n\r\n",
                                 b"DELETE /c/b HTTP/1.1\r\n\r\n"])
    text = body.decode()
    assert text.startswith(f"--{boundary}\r\nContent-Type: application/http\r\n"
                           "Content-Transfer-Encoding: binary\r\nContent-ID: 0\r\n\r\n"
                           "DELETE /c/a HTTP/1.1\r\nx: 1\r\n\r\n\r\n")
    assert text.endswith(f"--{boundary}--\r\n") and "Content-ID: 1\r\n" in text
    gcs = batch_body("b", [b"DELETE /x HTTP/1.1\r\n\r\n"], angle_ids=True, binary=False).decode()
    assert "Content-ID: <0>\r\n" in gcs and "Transfer-Encoding" not in gcs


def test_malformed_answers_are_refused() -> None:
    with pytest.raises(ValueError):
        parse_batch_response("multipart/mixed", AZURITE_ANSWER)  # no boundary
    with pytest.raises(ValueError):
        parse_batch_response("multipart/mixed; boundary=b", b"--b\r\nContent-ID: 0\r\n\r\n"
                             b"not http\r\n--b--")
