"""The GCS JSON API over raw HTTP: buckets, objects, listings, uploads, rewrite, delete, move,
batch, preconditions, the generation and etag rules."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import google_crc32c
import orjson

from committer.testing.cloud_sim import CloudSim
from committer.testing.cloud_sim.gcs_json import gcs_etag
from tests.testing.cloud_sim.client import Client, batch_body, gcs_object, parse_batch_answer


def _client(sim: CloudSim) -> Client:
    return Client(sim.ports["gcs"], sign=False)


def _bucket(c: Client, name: str = "bk") -> None:
    r = c.request("POST", "/storage/v1/b?project=sim", body=orjson.dumps({"name": name}),
                  headers={"Content-Type": "application/json"})
    assert r.status == 200, r.body


def _upload(c: Client, name: str, data: bytes, query: str = "",
            bucket: str = "bk") -> tuple[int, dict[str, Any]]:
    boundary = "==b=="
    body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
            + orjson.dumps({"name": name, "metadata": {"k": "v"}})
            + f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
            + data + f"\r\n--{boundary}--\r\n".encode())
    r = c.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart{query}",
                  body=body, headers={"Content-Type": f"multipart/related; boundary={boundary}"})
    return r.status, r.json()


def _crc(data: bytes) -> str:
    return base64.b64encode(int(google_crc32c.value(data)).to_bytes(4, "big")).decode()


def test_buckets(gcs: CloudSim) -> None:
    c = _client(gcs)
    assert c.request("GET", "/storage/v1/b/bk").status == 404
    _bucket(c)
    r = c.request("POST", "/storage/v1/b?project=sim", body=b'{"name": "bk"}')
    assert r.status == 409 and r.json()["error"]["errors"][0]["reason"] == "conflict"
    got = c.request("GET", "/storage/v1/b/bk").json()
    assert got["kind"] == "storage#bucket" and got["name"] == "bk"


def test_object_resource_and_media(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    data = b"some bytes"
    status, up = _upload(c, "dir/a b#?.txt", data)
    assert status == 200
    r = c.request("GET", gcs_object("bk", "dir/a b#?.txt"))
    assert r.status == 200
    obj = r.json()
    assert obj == up
    assert obj["kind"] == "storage#object" and obj["name"] == "dir/a b#?.txt"
    assert obj["bucket"] == "bk" and obj["size"] == str(len(data))
    assert isinstance(obj["generation"], str) and obj["metageneration"] == "1"
    assert obj["md5Hash"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    assert obj["crc32c"] == _crc(data)
    assert obj["etag"] == gcs_etag(int(obj["generation"]))  # the service's rule
    assert obj["metadata"] == {"k": "v"}
    assert obj["updated"].endswith("Z") and obj["timeCreated"]
    media = c.request("GET", gcs_object("bk", "dir/a b#?.txt") + "?alt=media")
    assert media.body == data
    assert media.headers["x-goog-hash"] == f"crc32c={obj['crc32c']},md5={obj['md5Hash']}"
    missing = c.request("GET", gcs_object("bk", "nope"))
    err = missing.json()["error"]
    assert missing.status == 404 and err["code"] == 404
    assert err["errors"][0]["reason"] == "notFound" and "bk/nope" in err["message"]
    simple = c.request("POST", "/upload/storage/v1/b/bk/o?uploadType=media&name=m%2Fq",
                       body=b"media!", headers={"Content-Type": "text/plain"})
    assert simple.status == 200 and simple.json()["contentType"] == "text/plain"
    assert c.request("POST", "/upload/storage/v1/b/none/o?uploadType=media&name=x",
                     body=b"1").status == 404


def test_upload_precondition(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    assert _upload(c, "x", b"1", "&ifGenerationMatch=0")[0] == 200
    status, body = _upload(c, "x", b"2", "&ifGenerationMatch=0")
    assert status == 412 and body["error"]["errors"][0]["reason"] == "conditionNotMet"
    assert c.request("GET", gcs_object("bk", "x") + "?alt=media").body == b"1"


def test_rewrite_gives_a_new_generation_and_etag_and_keeps_checksums(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    _, src = _upload(c, "s", b"content")
    url = f"/storage/v1/b/bk/o/s/rewriteTo/b/bk/o/{'d%2Fe'}?ifGenerationMatch=0"
    r = c.request("POST", url)
    out = r.json()
    assert r.status == 200 and out["kind"] == "storage#rewriteResponse" and out["done"] is True
    assert out["totalBytesRewritten"] == out["objectSize"] == "7"
    dst = out["resource"]
    assert dst["name"] == "d/e" and int(dst["generation"]) > int(src["generation"])
    assert dst["etag"] != src["etag"] and dst["etag"] == gcs_etag(int(dst["generation"]))
    assert (dst["md5Hash"], dst["crc32c"]) == (src["md5Hash"], src["crc32c"])
    again = c.request("POST", url)  # the destination exists now: the precondition holds it
    assert again.status == 412
    missing = c.request("POST", "/storage/v1/b/bk/o/none/rewriteTo/b/bk/o/z")
    assert missing.status == 404
    copy = c.request("POST", "/storage/v1/b/bk/o/s/copyTo/b/bk/o/c")
    assert copy.status == 200 and copy.json()["name"] == "c"


def test_delete_with_generation_preconditions(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    _, obj = _upload(c, "x", b"1")
    assert c.request("DELETE", gcs_object("bk", "x") + "?ifGenerationMatch=1").status == 412
    r = c.request("DELETE", gcs_object("bk", "x") + f"?ifGenerationMatch={obj['generation']}")
    assert (r.status, r.body) == (204, b"")
    assert c.request("DELETE", gcs_object("bk", "x")).status == 404


def test_list_objects(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    names = ["a/", "a/b", "a/b/c", "a/b-x", "b", "c/d/e"]
    for n in names:
        _upload(c, n, b"x")
    whole = c.request("GET", "/storage/v1/b/bk/o?fields=items(name),nextPageToken").json()
    assert whole["kind"] == "storage#objects"
    assert [o["name"] for o in whole["items"]] == sorted(names)
    top = c.request("GET", "/storage/v1/b/bk/o?delimiter=/").json()
    assert [o["name"] for o in top["items"]] == ["b"] and top["prefixes"] == ["a/", "c/"]
    sub = c.request("GET", "/storage/v1/b/bk/o?prefix=a/&delimiter=/").json()
    assert [o["name"] for o in sub["items"]] == ["a/", "a/b", "a/b-x"]
    assert sub["prefixes"] == ["a/b/"]
    seen: list[str] = []
    token = ""
    while True:
        page = c.request("GET", "/storage/v1/b/bk/o?maxResults=4"
                         + (f"&pageToken={token}" if token else "")).json()
        seen += [o["name"] for o in page.get("items", [])]
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert seen == sorted(names)
    assert "items" not in c.request("GET", "/storage/v1/b/bk/o?prefix=zzz").json()


def test_move_is_atomic_and_off_unless_asked(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    _, src = _upload(c, "s", b"moved")
    _upload(c, "taken", b"t")
    assert c.request("POST", "/storage/v1/b/bk/o/s/moveTo/o/taken?ifGenerationMatch=0"
                     ).status == 412
    r = c.request("POST", "/storage/v1/b/bk/o/s/moveTo/o/d%2Fn?ifGenerationMatch=0")
    assert r.status == 200
    moved = r.json()
    assert moved["name"] == "d/n" and moved["md5Hash"] == src["md5Hash"]
    assert int(moved["generation"]) > int(src["generation"])
    assert c.request("GET", gcs_object("bk", "s")).status == 404
    assert c.request("POST", "/storage/v1/b/bk/o/s/moveTo/o/x").status == 404
    with CloudSim(service="gcs", latency_ms=0) as plain:
        pc = _client(plain)
        _bucket(pc)
        _upload(pc, "s", b"1")
        assert pc.request("POST", "/storage/v1/b/bk/o/s/moveTo/o/t").status == 400
        assert pc.request("GET", gcs_object("bk", "s")).status == 200


def test_batch_deletes(gcs: CloudSim) -> None:
    c = _client(gcs)
    _bucket(c)
    for n in ("a/1", "a/2"):
        _upload(c, n, b"x")
    parts = [f"DELETE {gcs_object('bk', n)} HTTP/1.1\r\nContent-Type: application/json\r\n"
             f"\r\n".encode() for n in ("a/1", "missing", "a/2")]
    r = c.request("POST", "/batch/storage/v1", body=batch_body("BND", parts, gcs=True),
                  headers={"Content-Type": "multipart/mixed; boundary=BND"})
    assert r.status == 200 and r.headers["content-type"].startswith("multipart/mixed; boundary=")
    answers = parse_batch_answer(r.headers["content-type"], r.body)
    assert [(m["content-id"], s) for m, s, _, _ in answers] == [
        ("<response-0>", 204), ("<response-1>", 404), ("<response-2>", 204)]
    assert gcs.objects("bk") == []
    # a sub-request whose head has no blank line before the delimiter is taken too
    _upload(c, "b", b"x")
    part = f"DELETE {gcs_object('bk', 'b')} HTTP/1.1\r\n".encode()
    r = c.request("POST", "/batch/storage/v1",
                  body=batch_body("BND", [part], gcs=True, blank_line=False),
                  headers={"Content-Type": "multipart/mixed; boundary=BND"})
    assert [s for _, s, _, _ in parse_batch_answer(r.headers["content-type"], r.body)] == [204]
    too_many = batch_body("BND", [part] * 101, gcs=True)
    assert c.request("POST", "/batch/storage/v1", body=too_many,
                     headers={"Content-Type": "multipart/mixed; boundary=BND"}).status == 400


def test_unknown_requests_are_refused_naming_them(gcs: CloudSim) -> None:
    c = _client(gcs)
    r = c.request("PATCH", "/storage/v1/b/bk/o/x")
    assert r.status == 501 and "PATCH /storage/v1/b/bk/o/x" in r.json()["error"]["message"]
    assert c.request("GET", "/nothing/here").status == 501


def test_resumable_upload(gcs: CloudSim) -> None:
    """"Perform resumable uploads" (what Google's GCS connector sends for every file): a POST
    with ``uploadType=resumable`` opens a session named by the answer's ``Location``; bytes
    follow in PUTs with ``Content-Range`` (308 ``Resume Incomplete`` with the persisted
    ``Range`` until the last), the object exists only once complete, and preconditions
    (``ifGenerationMatch=0``) are checked then."""
    from urllib.parse import urlsplit

    c = _client(gcs)
    _bucket(c)
    start = c.request("POST", "/upload/storage/v1/b/bk/o?uploadType=resumable"
                      "&ifGenerationMatch=0",
                      body=orjson.dumps({"name": "dir/f", "contentType": "text/plain"}),
                      headers={"Content-Type": "application/json; charset=UTF-8",
                               "X-Upload-Content-Type": "text/plain"})
    assert start.status == 200, start.body
    location = urlsplit(start.headers["location"])
    assert location.netloc == f"127.0.0.1:{gcs.ports['gcs']}"
    session = location.path + "?" + location.query
    first = c.request("PUT", session, body=b"hello ", headers={"Content-Range": "bytes 0-5/*"})
    assert (first.status, first.headers["range"]) == (308, "bytes=0-5")
    assert c.request("GET", gcs_object("bk", "dir/f")).status == 404  # not yet
    # A chunk sent again (its answer lost) replaces its own bytes.
    again = c.request("PUT", session, body=b"hello ", headers={"Content-Range": "bytes 0-5/*"})
    assert again.status == 308
    bad = c.request("PUT", session, body=b"x", headers={"Content-Range": "bytes 9-9/*"})
    assert bad.status == 400
    done = c.request("PUT", session, body=b"world", headers={"Content-Range": "bytes 6-10/11"})
    assert done.status == 200
    resource = done.json()
    assert (resource["name"], resource["size"], resource["contentType"]) == (
        "dir/f", "11", "text/plain")
    assert resource["md5Hash"] == base64.b64encode(hashlib.md5(b"hello world").digest()).decode()
    assert c.request("GET", gcs_object("bk", "dir/f") + "?alt=media").body == b"hello world"
    assert c.request("PUT", session, headers={"Content-Range": "bytes */11"}).status == 404
    # An empty object, and a precondition that fails when the upload completes.
    for expect in (200, 412):
        s = c.request("POST", "/upload/storage/v1/b/bk/o?uploadType=resumable&name=e"
                      "&ifGenerationMatch=0")
        u = urlsplit(s.headers["location"])
        r = c.request("PUT", u.path + "?" + u.query, headers={"Content-Range": "bytes */0"})
        assert r.status == expect
    assert c.request("GET", gcs_object("bk", "e")).json()["size"] == "0"
