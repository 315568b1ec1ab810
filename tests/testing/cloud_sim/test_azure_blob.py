"""The Blob endpoint over raw HTTP: every operation the engine sends, its errors, conditions,
listings, Shared Key, Blob Batch."""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
import xml.etree.ElementTree as ET

import pytest

from committer.testing.cloud_sim import CloudSim
from tests.testing.cloud_sim.client import (
    ACCOUNT,
    Client,
    batch_body,
    blob_path,
    parse_batch_answer,
    signed_delete,
)

WRONG_KEY = base64.b64encode(b"not the key" * 6).decode()


def _client(sim: CloudSim, **kw: object) -> Client:
    return Client(sim.ports["blob"], **kw)  # type: ignore[arg-type]


def _container(c: Client, name: str = "c1") -> str:
    assert c.request("PUT", blob_path(name) + "?restype=container").status == 201
    return name


def _put(c: Client, name: str, data: bytes, headers: dict[str, str] | None = None,
         container: str = "c1") -> tuple[int, dict[str, str]]:
    r = c.request("PUT", blob_path(container, name), body=data,
                  headers={"x-ms-blob-type": "BlockBlob", **(headers or {})})
    return r.status, r.headers


def _list(c: Client, query: str, container: str = "c1") -> ET.Element:
    r = c.request("GET", blob_path(container) + "?restype=container&comp=list" + query)
    assert r.status == 200, r.body
    return ET.fromstring(r.body)


def _listed(root: ET.Element) -> list[str]:
    out = []
    for node in root.find("Blobs") or []:
        name = node.findtext("Name") or ""
        out.append(name + ("(prefix)" if node.tag == "BlobPrefix" else ""))
    return out


def test_account_information_tells_the_namespace(azure: CloudSim) -> None:
    r = _client(azure).request("GET", f"/{ACCOUNT}/?restype=account&comp=properties")
    assert r.status == 200
    assert r.headers["x-ms-is-hns-enabled"] == ("true" if azure.options.service == "adls"
                                                else "false")
    assert r.headers["x-ms-account-kind"] == "StorageV2" and r.headers["x-ms-sku-name"]


def test_every_answer_carries_request_id_version_and_date(azure: CloudSim) -> None:
    c = _client(azure)
    for r in (c.request("PUT", blob_path("c1") + "?restype=container",
                        headers={"x-ms-version": "2021-08-06"}),
              c.request("HEAD", blob_path("c1", "missing"),
                        headers={"x-ms-version": "2021-08-06"})):
        assert r.headers["x-ms-version"] == "2021-08-06"
        assert r.headers["x-ms-request-id"] and r.headers["date"].endswith("GMT")
    assert r.status == 404 and r.error_code == "BlobNotFound" and r.body == b""


def test_containers(azure: CloudSim) -> None:
    c = _client(azure)
    assert c.request("GET", blob_path("c1") + "?restype=container").error_code == \
        "ContainerNotFound"
    _container(c)
    again = c.request("PUT", blob_path("c1") + "?restype=container")
    assert (again.status, again.error_code) == (409, "ContainerAlreadyExists")
    assert b"<Code>ContainerAlreadyExists</Code>" in again.body
    for method in ("GET", "HEAD"):
        r = c.request(method, blob_path("c1") + "?restype=container")
        assert r.status == 200 and r.headers["etag"]
    status, _ = _put(c, "x", b"1", container="nope")
    assert status == 404


def test_put_blob_computes_md5_and_honours_if_none_match(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    data = b"hello world"
    status, h = _put(c, "dir/a b.txt", data, {"x-ms-meta-color": "blue"})
    assert status == 201
    assert h["content-md5"] == base64.b64encode(hashlib.md5(data).digest()).decode()
    etag = h["etag"]
    status, h2 = _put(c, "dir/a b.txt", b"other", {"If-None-Match": "*"})
    assert status == 409 and h2["x-ms-error-code"] == "BlobAlreadyExists"
    head = c.request("HEAD", blob_path("c1", "dir/a b.txt"))
    assert head.status == 200 and head.headers["etag"] == etag
    assert head.headers["content-length"] == str(len(data))
    assert head.headers["x-ms-meta-color"] == "blue"
    assert head.headers["content-md5"] == h["content-md5"]
    assert c.request("GET", blob_path("c1", "dir/a b.txt")).body == data
    ranged = c.request("GET", blob_path("c1", "dir/a b.txt"), headers={"x-ms-range": "bytes=6-"})
    assert (ranged.status, ranged.body) == (206, b"world")
    assert ranged.headers["content-range"] == f"bytes 6-10/{len(data)}"
    # overwriting without a condition replaces, with a new etag
    status, h3 = _put(c, "dir/a b.txt", b"v2")
    assert status == 201 and h3["etag"] != etag


def test_an_empty_blob_refuses_a_range_as_the_service_does(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    _put(c, "empty", b"")
    r = c.request("GET", blob_path("c1", "empty"), headers={"x-ms-range": "bytes=0-100"})
    assert (r.status, r.error_code) == (416, "InvalidRange")
    assert c.request("GET", blob_path("c1", "empty")).status == 200


def test_conditions_on_reads_and_deletes(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    _, h = _put(c, "f", b"x")
    assert c.request("HEAD", blob_path("c1", "f"), headers={"If-Match": '"0x1"'}).status == 412
    assert c.request("HEAD", blob_path("c1", "f"),
                     headers={"If-None-Match": h["etag"]}).status == 304
    r = c.request("DELETE", blob_path("c1", "f"), headers={"If-Match": '"0x1"'})
    assert (r.status, r.error_code) == (412, "ConditionNotMet")
    assert c.request("DELETE", blob_path("c1", "f"), headers={"If-Match": h["etag"]}).status \
        == 202


def test_copy_blob_keeps_md5_and_metadata_and_records_its_source(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    _, src = _put(c, "src/a", b"payload", {"x-ms-meta-k": "v", "x-ms-blob-content-type": "t/x"})
    source_url = f"http://127.0.0.1:{c.port}{blob_path('c1', 'src/a')}"
    r = c.request("PUT", blob_path("c1", "dst/a"),
                  headers={"x-ms-copy-source": source_url, "If-None-Match": "*"})
    assert r.status == 202 and r.headers["x-ms-copy-status"] == "success"
    assert r.headers["etag"] != src["etag"] and r.headers["x-ms-copy-id"]
    head = c.request("HEAD", blob_path("c1", "dst/a")).headers
    assert head["content-md5"] == src["content-md5"]
    assert head["x-ms-meta-k"] == "v" and head["content-type"] == "t/x"
    assert head["x-ms-copy-source"] == source_url and head["x-ms-copy-status"] == "success"
    assert head["x-ms-copy-id"] == r.headers["x-ms-copy-id"]
    assert head["x-ms-copy-progress"] == "7/7"
    assert c.request("GET", blob_path("c1", "dst/a")).body == b"payload"
    # the request's own metadata replaces the source's
    c.request("PUT", blob_path("c1", "dst/b"),
              headers={"x-ms-copy-source": source_url, "x-ms-meta-other": "1"})
    h = c.request("HEAD", blob_path("c1", "dst/b")).headers
    assert h["x-ms-meta-other"] == "1" and "x-ms-meta-k" not in h
    # an existing destination with If-None-Match: * (Azurite: 409 BlobAlreadyExists)
    again = c.request("PUT", blob_path("c1", "dst/a"),
                      headers={"x-ms-copy-source": source_url, "If-None-Match": "*"})
    assert (again.status, again.error_code) == (409, "BlobAlreadyExists")
    missing = c.request("PUT", blob_path("c1", "dst/c"), headers={
        "x-ms-copy-source": f"http://127.0.0.1:{c.port}{blob_path('c1', 'nope')}"})
    assert (missing.status, missing.error_code) == (404, "CannotVerifyCopySource")


def test_delete_blob(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    _put(c, "a/b", b"x")
    r = c.request("DELETE", blob_path("c1", "a/b"))
    assert r.status == 202 and r.headers["x-ms-delete-type-permanent"] == "true"
    r = c.request("DELETE", blob_path("c1", "a/b"))
    assert (r.status, r.error_code) == (404, "BlobNotFound")


def test_namespace_directories_through_the_blob_api(adls: CloudSim) -> None:
    c = _client(adls)
    _container(c)
    _put(c, "d1/d2/f", b"x")
    head = c.request("HEAD", blob_path("c1", "d1/d2"))
    assert head.status == 200 and head.headers["x-ms-meta-hdi_isfolder"] == "true"
    status, h = _put(c, "d1/d2", b"over a directory")
    assert (status, h["x-ms-error-code"]) == (409, "PathConflict")
    r = c.request("DELETE", blob_path("c1", "d1"))
    assert (r.status, r.error_code) == (409, "DirectoryIsNotEmpty")
    _put(c, "made", b"", {"x-ms-meta-hdi_isfolder": "true"})
    assert [o["is_dir"] for o in adls.objects("c1", "made")] == [True]
    assert c.request("DELETE", blob_path("c1", "made")).status == 202
    root = _list(c, "&include=metadata")
    blobs = {b.findtext("Name"): b for b in root.iter("Blob")}
    assert list(blobs) == ["d1", "d1/d2", "d1/d2/f"]
    assert blobs["d1"].findtext("Properties/ResourceType") == "directory"
    assert blobs["d1"].findtext("Metadata/hdi_isfolder") == "true"
    assert blobs["d1/d2/f"].findtext("Properties/ResourceType") == "file"


def test_list_blobs_orders_rolls_up_and_pages(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    names = ["a/b-x", "a/b/c", "a/b/d", "a/ba", "b", "z z"]
    for n in names:
        _put(c, n, n.encode(), {"x-ms-meta-n": "1"})
    hns = azure.options.service == "adls"
    expected = sorted(names + (["a", "a/b"] if hns else []))
    assert _listed(_list(c, "")) == expected
    top = _listed(_list(c, "&delimiter=/"))
    assert top == (["a", "a/(prefix)", "b", "z z"] if hns else ["a/(prefix)", "b", "z z"])
    assert _listed(_list(c, "&prefix=a/b&delimiter=/")) == (
        ["a/b", "a/b-x", "a/b/(prefix)", "a/ba"] if hns else ["a/b-x", "a/b/(prefix)", "a/ba"])
    seen: list[str] = []
    marker = ""
    pages = 0
    while True:
        root = _list(c, "&maxresults=2" + (f"&marker={marker}" if marker else ""))
        pages += 1
        seen += _listed(root)
        marker = root.findtext("NextMarker") or ""
        if not marker:
            break
    assert seen == expected and pages == (len(expected) + 1) // 2
    meta = _list(c, "&include=metadata&prefix=b")
    assert meta.findtext("Blobs/Blob/Metadata/n") == "1"
    props = meta.find("Blobs/Blob/Properties")
    assert props is not None and props.findtext("Content-Length") == "1"
    assert props.findtext("Content-MD5") == base64.b64encode(hashlib.md5(b"b").digest()).decode()
    assert _list(c, "&maxresults=6000").findtext("MaxResults") == "5000"


def test_shared_key_is_verified(azure: CloudSim) -> None:
    _container(_client(azure))
    wrong = _client(azure, key=WRONG_KEY).request("GET", blob_path("c1") + "?restype=container")
    assert (wrong.status, wrong.error_code) == (403, "AuthenticationFailed")
    assert b"<Code>AuthenticationFailed</Code>" in wrong.body
    anon = _client(azure, sign=False).request("GET", blob_path("c1") + "?restype=container")
    assert (anon.status, anon.error_code) == (403, "NoAuthenticationInformation")
    c = _client(azure, sign=False)
    assert c.request("GET", blob_path("c1") + "?restype=container&sv=1&sig=abc").status == 200
    assert c.request("GET", blob_path("c1") + "?restype=container",
                     headers={"Authorization": "Bearer token"}).status == 200


def test_signatures_can_be_switched_off() -> None:
    with CloudSim(service="blob", latency_ms=0, verify_signatures=False) as sim:
        r = _client(sim, key=WRONG_KEY).request("PUT", blob_path("c1") + "?restype=container")
        assert r.status == 201


def test_blob_batch_deletes_and_answers_each_part(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    for n in ("a", "dir/x y"):
        _put(c, n, b"1")
    boundary = f"batch_{uuid.uuid4()}"
    parts = [signed_delete(blob_path("c1", "a")), signed_delete(blob_path("c1", "missing")),
             signed_delete(blob_path("c1", "dir/x y")),
             signed_delete("/c1/no-account-segment"),
             signed_delete(blob_path("c1", "dir/x y"), key=WRONG_KEY)]
    body = batch_body(boundary, parts)
    r = c.request("POST", blob_path("c1") + "?restype=container&comp=batch", body=body,
                  headers={"Content-Type": f"multipart/mixed; boundary={boundary}"})
    assert r.status == 202
    assert re.fullmatch(r"multipart/mixed; boundary=batchresponse_[0-9a-f-]{36}",
                        r.headers["content-type"])
    answers = parse_batch_answer(r.headers["content-type"], r.body)
    assert [(m["content-id"], status, h.get("x-ms-error-code")) for m, status, h, _ in answers] \
        == [("0", 202, None), ("1", 404, "BlobNotFound"), ("2", 202, None),
            ("3", 400, "InvalidInput"), ("4", 403, "AuthenticationFailed")]
    assert answers[0][2]["x-ms-delete-type-permanent"] == "true"
    assert all(h["x-ms-request-id"] for _, _, h, _ in answers)
    assert b"<Code>BlobNotFound</Code>" in answers[1][3]
    assert azure.objects("c1", "a") == [] and azure.objects("c1", "dir/x") == []
    stats = azure.stats()
    assert stats["ops"] == stats["requests"] - 1 + len(parts)  # the batch counts its parts
    assert stats["sub_by_status"] == {"202": 2, "400": 1, "403": 1, "404": 1}
    # the account-level endpoint takes the same batch
    _put(c, "b", b"1")
    boundary = "batch_two"
    r = c.request("POST", f"/{ACCOUNT}/?comp=batch",
                  body=batch_body(boundary, [signed_delete(blob_path("c1", "b"))]),
                  headers={"Content-Type": f"multipart/mixed; boundary={boundary}"})
    assert r.status == 202
    assert [s for _, s, _, _ in parse_batch_answer(r.headers["content-type"], r.body)] == [202]


def test_batch_limits(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    body = batch_body("bb", [signed_delete(blob_path("c1", f"f{i}")) for i in range(257)])
    r = c.request("POST", blob_path("c1") + "?restype=container&comp=batch", body=body,
                  headers={"Content-Type": "multipart/mixed; boundary=bb"})
    assert (r.status, r.error_code) == (400, "InvalidInput")
    assert b"at most 256" in r.body


def test_unknown_requests_are_refused_naming_them(azure: CloudSim) -> None:
    c = _client(azure)
    _container(c)
    r = c.request("PUT", blob_path("c1", "x") + "?comp=lease", headers={
        "x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1"})
    assert r.status == 501 and b"PUT /devstoreaccount1/c1/x?comp=lease" in r.body
    r = c.request("GET", "/otheraccount/c1")
    assert (r.status, r.error_code) == (400, "InvalidUri")
    assert c.request("GET", blob_path("c1") + "?restype=container").status == 200


def test_sdk_blob_client_round_trip(azure: CloudSim) -> None:
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
    from azure.storage.blob import BlobServiceClient

    svc = BlobServiceClient.from_connection_string(azure.connection_string, retry_total=0)
    cc = svc.get_container_client("sdk")
    cc.create_container()
    cc.upload_blob("p/q r", b"abc", metadata={"m": "1"})
    with pytest.raises(ResourceExistsError):
        cc.upload_blob("p/q r", b"abc")
    src = cc.get_blob_client("p/q r")
    dst = cc.get_blob_client("p/copy")
    copy = dst.start_copy_from_url(src.url, match_condition=MatchConditions.IfMissing)
    assert copy["copy_status"] == "success"
    props = dst.get_blob_properties()
    assert props.size == 3 and props.metadata == {"m": "1"}
    assert props.copy.status == "success" and props.copy.source == src.url
    assert bytes(props.content_settings.content_md5 or b"") == hashlib.md5(b"abc").digest()
    assert dst.download_blob().readall() == b"abc"
    with pytest.raises(ResourceNotFoundError):
        cc.get_blob_client("nope").get_blob_properties()
    names = sorted(b.name for b in cc.list_blobs(name_starts_with="p/"))
    assert names == ["p/copy", "p/q r"]
    results = cc.delete_blobs("p/copy", "p/q r", "p/none", raise_on_any_failure=False)
    assert [r.status_code for r in results] == [202, 202, 404]
    hns: object = svc.get_account_information()["is_hns_enabled"]
    assert hns is (azure.options.service == "adls")


def test_put_block_and_put_block_list(blob: CloudSim) -> None:
    """"Put Block" stages a block under the blob's name (uncommitted: nothing to read yet);
    "Put Block List" writes the blob as the listed blocks in order (``Latest``: the
    uncommitted block of that id, else the committed one), drops the others, and is refused
    whole (400 ``InvalidBlockList``) when a listed block is not there. What Hadoop 3.5's ABFS
    sends for every file on a flat account."""
    c = _client(blob)
    _container(c)
    path = blob_path("c1", "dir/f")
    ids = [base64.b64encode(f"block-{i:03d}".encode()).decode() for i in range(3)]
    for block_id, data in zip(ids, (b"hello ", b"world", b"unused"), strict=True):
        r = c.request("PUT", f"{path}?comp=block&blockid={block_id.replace('=', '%3D')}",
                      body=data)
        assert r.status == 201, r.body
    assert c.request("HEAD", path).status == 404  # staged only
    listed = c.request("GET", f"{path}?comp=blocklist&blocklisttype=uncommitted")
    assert listed.status == 200  # "Get Block List": a blob's uncommitted blocks, before it
    assert [n.text for n in ET.fromstring(listed.body).iter("Name")] == ids
    body = ("<?xml version='1.0' encoding='utf-8'?><BlockList>" +
            "".join(f"<Latest>{i}</Latest>" for i in ids[:2]) + "</BlockList>").encode()
    r = c.request("PUT", f"{path}?comp=blocklist", body=body,
                  headers={"x-ms-blob-content-type": "text/plain", "x-ms-meta-k": "v"})
    assert r.status == 201 and r.headers["etag"]
    got = c.request("GET", path)
    assert got.body == b"hello world"
    assert got.headers["content-type"] == "text/plain"
    assert "content-md5" not in got.headers  # none computed for a block list
    committed = ET.fromstring(c.request("GET", f"{path}?comp=blocklist").body)
    assert [n.text for n in committed.iter("Name")] == ids[:2]
    # Appending: the committed blocks, then a new one; a block not there refuses it all.
    new = base64.b64encode(b"block-new").decode()
    c.request("PUT", f"{path}?comp=block&blockid={new.replace('=', '%3D')}", body=b"!")
    missing = ("<BlockList><Committed>" + ids[0] + "</Committed><Latest>bm9uZQ==</Latest>"
               "</BlockList>").encode()
    r = c.request("PUT", f"{path}?comp=blocklist", body=missing)
    assert (r.status, r.error_code) == (400, "InvalidBlockList")
    assert c.request("GET", path).body == b"hello world"
    append = ("<BlockList>" + "".join(f"<Committed>{i}</Committed>" for i in ids[:2]) +
              f"<Latest>{new}</Latest></BlockList>").encode()
    assert c.request("PUT", f"{path}?comp=blocklist", body=append).status == 201
    assert c.request("GET", path).body == b"hello world!"
    # Conditions hold as for any write.
    r = c.request("PUT", f"{path}?comp=blocklist", body=append, headers={"If-None-Match": "*"})
    assert (r.status, r.error_code) == (409, "BlobAlreadyExists")
