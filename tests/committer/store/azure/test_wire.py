"""A Blob Batch answer read back into a result per delete: done, already gone, refused, or
left without an answer (a transient failure whose outcome is unknown, named by its path)."""

from __future__ import annotations

from committer.errors import StoreError, TransientStoreError
from committer.store.azure.wire import delete_results
from committer.store.http.messages import Response

_URLS = ["/c/a", "/c/b", "/c/c", "/c/d"]


def _part(content_id: int, status_line: str, headers: str = "") -> bytes:
    return (f"--batchresponse_1\r\nContent-Type: application/http\r\nContent-ID: {content_id}"
            f"\r\n\r\nHTTP/1.1 {status_line}\r\n{headers}\r\n").encode()


def _answer(*parts: bytes) -> Response:
    body = b"".join(parts) + b"--batchresponse_1--\r\n"
    response = Response(202, "Accepted",
                        {"content-type": "multipart/mixed; boundary=batchresponse_1"}, body)
    response.request_id = "batch-id"
    return response


def test_each_delete_gets_its_own_result_and_a_missing_answer_is_a_transient_failure() -> None:
    # /c/c has no part in the answer; the parts come out of order
    results, throttled = delete_results(_answer(
        _part(3, "503 Server Busy", "x-ms-error-code: ServerBusy\r\n"),
        _part(1, "404 The specified blob does not exist.", "x-ms-error-code: BlobNotFound\r\n"),
        _part(0, "202 Accepted")), _URLS)
    a, b, c, d = results
    assert a is None and b is None  # deleted; already gone, as wanted
    assert isinstance(c, TransientStoreError) and c.path == "/c/c"
    assert "no answer in the batch for /c/c" in str(c)
    assert isinstance(d, StoreError) and d.path == "/c/d" and throttled == 1


def test_an_answer_with_every_part_makes_no_error() -> None:
    results, throttled = delete_results(
        _answer(*(_part(i, "202 Accepted") for i in range(len(_URLS)))), _URLS)
    assert results == [None] * len(_URLS) and throttled == 0


def test_parts_naming_no_delete_of_the_batch_are_ignored() -> None:
    results, _ = delete_results(_answer(_part(7, "202 Accepted"), _part(0, "202 Accepted")),
                                _URLS[:2])
    assert results[0] is None
    assert isinstance(results[1], TransientStoreError) and results[1].path == "/c/b"
