"""The simulator's small parts on their own: Shared Key, multipart bodies, the throttle, the
latency model, faults, the timeline."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import statistics
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from committer.store.http.multipart import parse_batch_response
from committer.testing.cloud_sim.faults import (
    GARBLE,
    LOSE,
    THROTTLE,
    Fail,
    FaultError,
    Faults,
    garbled,
)
from committer.testing.cloud_sim.latency import Latency
from committer.testing.cloud_sim.multipart import (
    MultipartError,
    SubResponse,
    parse_batch,
    parse_related,
    render_batch,
)
from committer.testing.cloud_sim.server import unquote_fast
from committer.testing.cloud_sim.shared_key import (
    SharedKeyVerifier,
    authorization,
    string_to_sign,
)
from committer.testing.cloud_sim.throttle import TokenBucket
from committer.testing.cloud_sim.timeline import Timeline
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

# -- Shared Key ------------------------------------------------------------------------------

HEADERS = {"x-ms-date": "Wed, 25 Nov 2026 08:33:28 GMT", "x-ms-version": "2025-11-05",
           "content-length": "0", "if-none-match": "*", "x-ms-meta-b": "2", "x-ms-meta-a": "1"}


def test_string_to_sign_follows_the_documented_canonical_form() -> None:
    text = string_to_sign("PUT", "/devstoreaccount1/c/a%20b", [("restype", "x"), ("Comp", "y"),
                                                                ("comp", "z")],
                          HEADERS, "devstoreaccount1")
    assert text == (
        "PUT\n\n\n\n\n\n\n\n\n*\n\n\n"  # Content-Length 0 signs as empty
        "x-ms-date:Wed, 25 Nov 2026 08:33:28 GMT\nx-ms-meta-a:1\nx-ms-meta-b:2\n"
        "x-ms-version:2025-11-05\n"
        "/devstoreaccount1/devstoreaccount1/c/a%20b\ncomp:y,z\nrestype:x")


def test_signature_is_hmac_sha256_under_the_decoded_key() -> None:
    auth = authorization(AZURITE_ACCOUNT, AZURITE_KEY, "GET", "/devstoreaccount1/c", [],
                         HEADERS)
    text = string_to_sign("GET", "/devstoreaccount1/c", [], HEADERS, AZURITE_ACCOUNT)
    expected = base64.b64encode(hmac.new(base64.b64decode(AZURITE_KEY), text.encode(),
                                         hashlib.sha256).digest()).decode()
    assert auth == f"SharedKey {AZURITE_ACCOUNT}:{expected}"


def test_verifier_accepts_the_key_and_refuses_anything_changed() -> None:
    v = SharedKeyVerifier(AZURITE_ACCOUNT, AZURITE_KEY)
    query = [("mode", "legacy")]
    auth = authorization(AZURITE_ACCOUNT, AZURITE_KEY, "PUT", "/devstoreaccount1/c/x", query,
                         HEADERS)
    assert v.verify(auth, "PUT", "/devstoreaccount1/c/x", query, HEADERS)
    assert not v.verify(auth, "PUT", "/devstoreaccount1/c/y", query, HEADERS)
    assert not v.verify(auth, "PUT", "/devstoreaccount1/c/x", [("mode", "posix")], HEADERS)
    assert not v.verify(auth, "PUT", "/devstoreaccount1/c/x", query,
                        {**HEADERS, "x-ms-meta-a": "changed"})
    other = base64.b64encode(b"k" * 64).decode()
    assert not v.verify(authorization(AZURITE_ACCOUNT, other, "PUT", "/devstoreaccount1/c/x",
                                      query, HEADERS), "PUT", "/devstoreaccount1/c/x", query,
                        HEADERS)
    assert not v.verify(auth.replace(AZURITE_ACCOUNT, "someoneelse"), "PUT",
                        "/devstoreaccount1/c/x", query, HEADERS)


def test_verifier_takes_the_documented_whitespace_folding() -> None:
    v = SharedKeyVerifier(AZURITE_ACCOUNT, AZURITE_KEY)
    headers = {**HEADERS, "x-ms-meta-a": "two  spaces"}
    folded = string_to_sign("GET", "/devstoreaccount1/c", [], headers, AZURITE_ACCOUNT,
                            fold_whitespace=True)
    digest = hmac.new(base64.b64decode(AZURITE_KEY), folded.encode(), hashlib.sha256).digest()
    auth = f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(digest).decode()}"
    assert v.verify(auth, "GET", "/devstoreaccount1/c", [], headers)


# -- multipart -------------------------------------------------------------------------------

def _batch(parts: list[bytes], boundary: str = "b_1") -> bytes:
    out = b"".join(f"--{boundary}\r\nContent-Type: application/http\r\nContent-ID: {i}\r\n\r\n"
                   .encode() + p for i, p in enumerate(parts))
    return out + f"--{boundary}--\r\n".encode()


def test_batch_parts_parse_with_or_without_the_blank_line_before_a_delimiter() -> None:
    body = _batch([b"DELETE /a/b? HTTP/1.1\r\nx-ms-date: d\r\nContent-Length: 0\r\n\r\n\r\n",
                   b"DELETE https://host:1/c/d HTTP/1.1\r\nX-A: 1\r\n"])
    subs = parse_batch(body, "multipart/mixed; boundary=b_1", limit=10)
    assert [(s.content_id, s.method, s.path, s.raw_query) for s in subs] == [
        ("0", "DELETE", "/a/b", ""), ("1", "DELETE", "/c/d", "")]
    assert subs[0].headers == {"x-ms-date": "d", "content-length": "0"}
    assert subs[1].headers == {"x-a": "1"}


def test_batch_limits_and_malformed_bodies_are_refused() -> None:
    one = b"DELETE /a HTTP/1.1\r\n\r\n\r\n"
    with pytest.raises(MultipartError, match="at most 2"):
        parse_batch(_batch([one] * 3), "multipart/mixed; boundary=b_1", limit=2)
    with pytest.raises(MultipartError, match="no boundary"):
        parse_batch(_batch([one]), "multipart/mixed", limit=2)
    with pytest.raises(MultipartError, match="closing delimiter"):
        parse_batch(_batch([one])[:-10], "multipart/mixed; boundary=b_1", limit=2)
    with pytest.raises(MultipartError, match="request line"):
        parse_batch(_batch([b"not http\r\n\r\n\r\n"]), "multipart/mixed; boundary=b_1", limit=2)
    with pytest.raises(MultipartError, match="not a multipart"):
        parse_batch(b"", "application/json", limit=2)


def test_batch_answer_layout() -> None:
    body = render_batch("r", [SubResponse("0", 202, "Accepted", "x-a: 1\r\n"),
                              SubResponse("<response-1>", 404, "Not Found",
                                          "Content-Type: t\r\n", b"{}")])
    assert body == (b"--r\r\nContent-Type: application/http\r\nContent-ID: 0\r\n\r\n"
                    b"HTTP/1.1 202 Accepted\r\nx-a: 1\r\n\r\n\r\n"
                    b"--r\r\nContent-Type: application/http\r\nContent-ID: <response-1>\r\n\r\n"
                    b"HTTP/1.1 404 Not Found\r\nContent-Type: t\r\n\r\n{}\r\n--r--\r\n")


def test_related_upload_parts() -> None:
    body = (b"--z\r\nContent-Type: application/json\r\n\r\n{\"name\": \"o\"}\r\n"
            b"--z\r\nContent-Type: text/plain\r\n\r\nhello\r\n\r\n--z--\r\n")
    meta, ctype, media = parse_related(body, 'multipart/related; boundary="z"')
    assert (meta, ctype, media) == (b'{"name": "o"}', "text/plain", b"hello\r\n")


def test_related_upload_with_lf_line_breaks_keeps_the_media_exact() -> None:
    # as gcsfs writes it: LF alone, the boundary quoted, no line break after the closing one
    for media in (b"hello", b"ends in CR\r", b"ends in LF\n", b"\r\n", b""):
        body = (b'--==0==\nContent-Type: application/json; charset=UTF-8\n\n{"name": "o"}'
                b"\n--==0==\nContent-Type: application/octet-stream\n\n" + media
                + b"\n--==0==--")
        meta, ctype, got = parse_related(body, 'multipart/related; boundary="==0=="')
        assert (meta, ctype, got) == (b'{"name": "o"}', "application/octet-stream", media)


def test_batch_with_lf_line_breaks_and_no_blank_line_after_a_head() -> None:
    # gcsfs's batch delete: a preamble line, LF alone, each part's head up to the delimiter
    part = ("\n--=b=\nContent-Type: application/http\nContent-ID: <x+{i}>\n\n"
            "DELETE /storage/v1/b/k/o/{i} HTTP/1.1\nContent-Type: application/json\n"
            "content-length: 0\n")
    body = "".join(part.format(i=i) for i in (1, 2)) + "\n--=b=--"
    subs = parse_batch(body.encode(), 'multipart/mixed; boundary="=b="', limit=10)
    assert [(s.content_id, s.method, s.path, s.body) for s in subs] == [
        ("<x+1>", "DELETE", "/storage/v1/b/k/o/1", b""),
        ("<x+2>", "DELETE", "/storage/v1/b/k/o/2", b"")]
    assert subs[0].headers == {"content-type": "application/json", "content-length": "0"}


# -- percent-decoding --------------------------------------------------------------------------

_PIECES = st.sampled_from(["%2F", "%3D", "%20", "%2f", "%25", "%C3%A9", "%C3", "%", "%2",
                           "%zz", "2F", "3D", "a", "/", "=", " ", "é", "+"])


@given(st.lists(_PIECES, max_size=12).map("".join))
def test_unquote_fast_decodes_as_urllib_does(text: str) -> None:
    assert unquote_fast(text) == unquote(text)


# -- throttle ----------------------------------------------------------------------------------

def test_token_bucket_rate_burst_and_retry_after() -> None:
    bucket = TokenBucket(10, 0.5, now=0.0)  # capacity 5
    assert all(bucket.take(1, 0.0) for _ in range(5))
    assert not bucket.take(1, 0.0)
    assert bucket.retry_after(1, 0.0) == 1  # 0.1 s, rounded up to a whole second, at least 1
    assert bucket.take(1, 0.1)
    assert not bucket.take(3, 0.1)  # all or nothing
    assert bucket.tokens == pytest.approx(0.0)
    assert bucket.retry_after(5, 0.1) == 1
    big = TokenBucket(1, 2.0, now=0.0)  # capacity 2
    assert big.take(2, 0.0)
    assert big.retry_after(2, 0.0) == 2
    # a batch above the capacity goes through once the bucket is full, leaving a debt
    assert not big.take(5, 1.0) and big.take(5, 2.0)
    assert big.tokens == pytest.approx(-3.0)


# -- latency -----------------------------------------------------------------------------------

def test_latency_is_lognormal_with_the_given_median_and_p99() -> None:
    model = Latency(20, 200, seed=3)
    draws = sorted(model.draw() for _ in range(40_000))
    assert statistics.median(draws) == pytest.approx(0.020, rel=0.05)
    assert draws[int(len(draws) * 0.99)] == pytest.approx(0.200, rel=0.15)
    assert Latency(20, 200, seed=3).draw() == Latency(20, 200, seed=3).draw()
    assert Latency(0, 0).draw() == 0.0
    assert Latency(5, 5).draw() == 0.005
    assert math.log(200 / 20) / model.describe()["sigma"] == pytest.approx(2.326, abs=0.001)
    with pytest.raises(ValueError):
        Latency(20, 10)


def test_a_batch_waits_for_its_slowest_sub_request() -> None:
    model = Latency(20, 200, seed=3)
    singles = sorted(model.draw() for _ in range(4_000))
    batches = sorted(model.draw_slowest(100) for _ in range(4_000))
    # the median of the largest of 100 draws is the draws' 99.3th percentile: ~0.23 s
    assert statistics.median(batches) == pytest.approx(0.23, rel=0.15)
    assert statistics.median(batches) > singles[int(len(singles) * 0.98)]
    assert model.draw_slowest(1) < 2.0 and Latency(5, 5).draw_slowest(10) == 0.005
    assert Latency(0, 0).draw_slowest(100) == 0.0


# -- faults ------------------------------------------------------------------------------------

def test_scripted_faults_are_consumed_in_order_and_by_operation() -> None:
    faults = Faults(seed=1)
    faults.configure({"fail": [{"op": "copy_blob", "times": 2, "status": 500,
                                "code": "InternalError"}],
                      "lose": [{"op": "copy_blob"}, {"op": "delete_blob"}]})
    drawn = [faults.draw("copy_blob") for _ in range(4)]
    assert [type(d) for d in drawn[:2]] == [Fail, Fail]
    assert isinstance(drawn[0], Fail) and drawn[0].status == 500
    assert drawn[0].code == "InternalError"
    assert drawn[2:] == [LOSE, None]
    # a sub-request cannot lose its answer alone: the lose rule waits for a whole request
    assert faults.draw("delete_blob", can_lose=False) is None
    assert faults.draw("delete_blob") is LOSE
    assert not faults.active


def test_a_garbled_batch_answer_cannot_be_read_but_keeps_its_layout() -> None:
    faults = Faults(seed=1)
    faults.configure({"garble": [{"op": "gcs_batch", "times": 1}]})
    assert faults.describe()["scripted"] == [{"op": "gcs_batch", "remaining": 1,
                                              "kind": "garble"}]
    assert faults.draw("gcs_batch", can_lose=False) is None  # not for a sub-request
    assert faults.draw("gcs_batch") is GARBLE and not faults.active
    body = render_batch("r", [SubResponse("0", 204, "No Content"),
                              SubResponse("1", 404, "Not Found", "", b"{}")])
    bad = garbled(body)
    assert bad.count(b"--r") == body.count(b"--r") and b"HTTP/1.1" not in bad
    with pytest.raises(ValueError, match="no HTTP response"):
        parse_batch_response("multipart/mixed; boundary=r", bad)
    with pytest.raises(FaultError, match="bad garble rule"):
        faults.configure({"garble": [{"times": 1}]})


def test_random_faults_follow_their_rates_and_operations() -> None:
    faults = Faults(seed=2)
    faults.configure({"throttle_rate": 0.25, "lose_rate": 0.5, "ops": ["head"]})
    drawn = [faults.draw("head") for _ in range(4000)]
    assert drawn.count(THROTTLE) == pytest.approx(1000, rel=0.1)
    assert drawn.count(LOSE) == pytest.approx(1500, rel=0.1)  # half of the rest
    assert all(faults.draw("copy") is None for _ in range(100))
    faults.configure({"clear": True})
    assert not faults.active
    for bad in ({"throttle_rate": 2}, {"fail": [{"times": 1}]}, {"nonsense": 1}):
        with pytest.raises(FaultError):
            faults.configure(bad)


# -- timeline ----------------------------------------------------------------------------------

def test_timeline_buckets_count_and_weigh_in_flight_by_time() -> None:
    tl = Timeline(now=0.0)
    tl.arrive(0.00, 1)
    tl.arrive(0.05, 3)  # a batch of three
    tl.depart(0.10, 1)  # bucket 1
    tl.throttle(0.12, 1)
    tl.depart(0.35, 3, lost=True)  # bucket 3 (bucket 2 quiet)
    snap = tl.snapshot(0.36)["buckets"]
    assert [b["t"] for b in snap] == [0.0, 0.1, 0.2, 0.3]
    first = snap[0]
    assert (first["arrivals"], first["arrivals_ops"], first["max_in_flight"],
            first["max_in_flight_ops"]) == (2, 4, 2, 4)
    assert first["mean_in_flight"] == pytest.approx(1.5)  # 1 for 50 ms, 2 for 50 ms
    assert (snap[1]["responses"], snap[1]["throttled"]) == (1, 1)
    assert snap[2]["arrivals"] == 0 and snap[2]["mean_in_flight"] == pytest.approx(1.0)
    assert snap[3]["lost"] == 1 and snap[3]["responses"] == 0 and snap[3]["partial"]
