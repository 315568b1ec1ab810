"""The simulator next to the emulators: the same requests sent to Azurite (Blob) and to
fake-gcs-server (GCS JSON API) as to the simulator, their answers compared.

Where they agree the test asserts the same answer; where the simulator follows the real
service and the emulator does not, the test pins both answers (so a change on either side is
seen), and the simulator's module docs say which it follows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from committer.testing.cloud_sim import CloudSim
from committer.testing.emulators import RunningEmulator
from tests.emulator_fixtures import azurite_emulator, gcs_emulator
from tests.testing.cloud_sim.client import (
    Client,
    batch_body,
    blob_path,
    gcs_object,
    parse_batch_answer,
    signed_delete,
)

pytestmark = pytest.mark.emulator
__all__ = ["azurite_emulator", "gcs_emulator"]


# -- Azure Blob: Azurite and the simulator's flat account --------------------------------------


def _on_both(sim: CloudSim, azurite: RunningEmulator,
             scenario: Callable[[Client, str], Any]) -> tuple[Any, Any]:
    """``scenario(client, container)`` on Azurite and on the simulator, in a new container."""
    out = []
    for port in (azurite.port, sim.ports["blob"]):
        c = Client(port)
        container = f"c{uuid.uuid4().hex[:12]}"
        assert c.request("PUT", blob_path(container) + "?restype=container").status == 201
        out.append(scenario(c, container))
        c.close()
    return out[0], out[1]


def _put(c: Client, container: str, name: str,
         headers: dict[str, str] | None = None) -> tuple[int, str | None]:
    r = c.request("PUT", blob_path(container, name), body=b"data",
                  headers={"x-ms-blob-type": "BlockBlob", **(headers or {})})
    return r.status, r.error_code


def test_conditional_writes_and_missing_blobs(blob: CloudSim,
                                              azurite_emulator: RunningEmulator) -> None:
    def scenario(c: Client, container: str) -> list[Any]:
        _put(c, container, "a")
        _put(c, container, "b")
        source = f"http://127.0.0.1:{c.port}{blob_path(container, 'a')}"
        copy_over = c.request("PUT", blob_path(container, "b"),
                              headers={"x-ms-copy-source": source, "If-None-Match": "*"})
        head = c.request("HEAD", blob_path(container, "none"))
        delete = c.request("DELETE", blob_path(container, "none"))
        return [_put(c, container, "a", {"If-None-Match": "*"}),
                (copy_over.status, copy_over.error_code),
                (head.status, head.error_code, head.body),
                (delete.status, delete.error_code)]

    on_azurite, on_sim = _on_both(blob, azurite_emulator, scenario)
    assert on_azurite == on_sim == [(409, "BlobAlreadyExists"), (409, "BlobAlreadyExists"),
                                    (404, "BlobNotFound", b""), (404, "BlobNotFound")]


def test_copy_from_a_missing_source(blob: CloudSim,
                                    azurite_emulator: RunningEmulator) -> None:
    def scenario(c: Client, container: str) -> tuple[int, str | None]:
        source = f"http://127.0.0.1:{c.port}{blob_path(container, 'none')}"
        r = c.request("PUT", blob_path(container, "x"), headers={"x-ms-copy-source": source})
        return r.status, r.error_code

    # the simulator keeps the ADLS stub's (and the service's documented) code
    assert _on_both(blob, azurite_emulator, scenario) == (
        (404, "BlobNotFound"), (404, "CannotVerifyCopySource"))


def test_a_wrong_key_is_refused(blob: CloudSim, azurite_emulator: RunningEmulator) -> None:
    def scenario(c: Client, container: str) -> tuple[int, str | None]:
        wrong = Client(c.port, key="QUJD" * 22)
        r = wrong.request("GET", blob_path(container) + "?restype=container")
        return r.status, r.error_code

    # the service's code is AuthenticationFailed; Azurite says AuthorizationFailure
    assert _on_both(blob, azurite_emulator, scenario) == (
        (403, "AuthorizationFailure"), (403, "AuthenticationFailed"))


def test_blob_batch_answers_alike(blob: CloudSim, azurite_emulator: RunningEmulator) -> None:
    def scenario(c: Client, container: str) -> list[Any]:
        for name in ("a", "d/x y"):
            _put(c, container, name)
        parts = [signed_delete(blob_path(container, "a")),
                 signed_delete(blob_path(container, "missing")),
                 signed_delete(blob_path(container, "d/x y"))]
        r = c.request("POST", blob_path(container) + "?restype=container&comp=batch",
                      body=batch_body("batch_x", parts),
                      headers={"Content-Type": "multipart/mixed; boundary=batch_x"})
        answers = parse_batch_answer(r.headers["content-type"], r.body)
        no_account = c.request(
            "POST", blob_path(container) + "?restype=container&comp=batch",
            body=batch_body("batch_y", [signed_delete(f"/{container}/a")]),
            headers={"Content-Type": "multipart/mixed; boundary=batch_y"})
        [(_, bad_status, bad_headers, _)] = parse_batch_answer(
            no_account.headers["content-type"], no_account.body)
        return [r.status, r.headers["content-type"].split("boundary=")[1][:14],
                [(m.get("content-type"), m.get("content-id"), status,
                  h.get("x-ms-error-code"), h.get("x-ms-delete-type-permanent"),
                  bool(h.get("x-ms-request-id"))) for m, status, h, _ in answers],
                no_account.status, bad_status, bad_headers.get("x-ms-error-code")]

    on_azurite, on_sim = _on_both(blob, azurite_emulator, scenario)
    assert on_azurite == on_sim
    assert on_sim[0] == 202 and on_sim[1] == "batchresponse_"
    assert [status for _, _, status, *_ in on_sim[2]] == [202, 404, 202]
    assert on_sim[3:] == [202, 400, "InvalidInput"]


def test_sdk_batch_delete(blob: CloudSim, azurite_emulator: RunningEmulator) -> None:
    from azure.storage.blob import BlobServiceClient

    from committer.testing.emulators import azurite_connection_string

    statuses = []
    for cs in (azurite_connection_string(azurite_emulator.port), blob.connection_string):
        cc = BlobServiceClient.from_connection_string(cs, retry_total=0).get_container_client(
            f"s{uuid.uuid4().hex[:10]}")
        cc.create_container()
        for name in ("x", "y/z"):
            cc.upload_blob(name, b"1")
        statuses.append([r.status_code for r in cc.delete_blobs(
            "x", "nope", "y/z", raise_on_any_failure=False)])
        assert not list(cc.list_blobs())
    assert statuses[0] == statuses[1] == [202, 404, 202]


def test_listings_page_alike(blob: CloudSim, azurite_emulator: RunningEmulator) -> None:
    import xml.etree.ElementTree as ET

    def scenario(c: Client, container: str) -> list[Any]:
        for name in ("a/b-x", "a/b/c", "a/b/d", "a/ba", "b", "z z", "a/b"):
            _put(c, container, name)
        pages = []
        for query in ("", "&delimiter=/", "&prefix=a/b&delimiter=/"):
            marker = ""
            while True:
                r = c.request("GET", blob_path(container) + "?restype=container&comp=list"
                              + query + "&maxresults=2"
                              + (f"&marker={quote(marker)}" if marker else ""))
                root = ET.fromstring(r.body)
                pages.append([(n.tag, n.findtext("Name")) for n in root.find("Blobs") or []])
                marker = root.findtext("NextMarker") or ""
                if not marker:
                    break
        return pages

    on_azurite, on_sim = _on_both(blob, azurite_emulator, scenario)
    assert on_azurite == on_sim


# -- GCS: fake-gcs-server and the simulator ----------------------------------------------------


def _gcs_both(sim: CloudSim, emulator: RunningEmulator,
              scenario: Callable[[Client, str], Any]) -> tuple[Any, Any]:
    out = []
    for port in (emulator.port, sim.ports["gcs"]):
        c = Client(port, sign=False)
        bucket = f"g{uuid.uuid4().hex[:12]}"
        assert c.request("POST", "/storage/v1/b?project=p",
                         body=orjson.dumps({"name": bucket})).status == 200
        out.append(scenario(c, bucket))
        c.close()
    return out[0], out[1]


def _upload(c: Client, bucket: str, name: str, data: bytes = b"data",
            query: str = "") -> tuple[int, dict[str, Any]]:
    body = (b"--B\r\nContent-Type: application/json\r\n\r\n" + orjson.dumps({"name": name})
            + b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n" + data
            + b"\r\n--B--\r\n")
    r = c.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart{query}",
                  body=body, headers={"Content-Type": "multipart/related; boundary=B"})
    return r.status, r.json()


def test_gcs_objects_and_preconditions(gcs: CloudSim, gcs_emulator: RunningEmulator) -> None:
    def scenario(c: Client, bucket: str) -> list[Any]:
        status, made = _upload(c, bucket, "d/x", b"hello")
        again, _ = _upload(c, bucket, "d/x", b"other", "&ifGenerationMatch=0")
        got = c.request("GET", gcs_object(bucket, "d/x")).json()
        missing = c.request("GET", gcs_object(bucket, "d/none")).status
        media = c.request("GET", gcs_object(bucket, "d/x") + "?alt=media").body
        keys = ("name", "bucket", "size", "md5Hash", "crc32c", "generation", "metageneration",
                "contentType")
        return [status, again, missing, media, {k: got[k] for k in keys if k != "generation"},
                got["generation"] == made["generation"]]

    assert _gcs_both(gcs, gcs_emulator, lambda c, b: scenario(c, b)[:4]) == (
        [200, 412, 404, b"hello"],) * 2
    on_fake, on_sim = _gcs_both(gcs, gcs_emulator, scenario)
    for out in (on_fake, on_sim):
        out[4].pop("bucket")
    assert on_fake == on_sim


def test_gcs_listings_alike(gcs: CloudSim, gcs_emulator: RunningEmulator) -> None:
    def scenario(c: Client, bucket: str) -> list[Any]:
        for name in ("a/", "a/b", "a/b/c", "a/b-x", "b", "c/d/e"):
            _upload(c, bucket, name)
        out = []
        for query in ("", "?delimiter=/", "?prefix=a/&delimiter=/", "?prefix=a/b"):
            page = c.request("GET", f"/storage/v1/b/{bucket}/o{query}").json()
            out.append(([o["name"] for o in page.get("items", [])], page.get("prefixes", [])))
        return out

    on_fake, on_sim = _gcs_both(gcs, gcs_emulator, scenario)
    assert on_fake == on_sim


def test_gcs_differences_the_simulator_keeps(gcs: CloudSim,
                                             gcs_emulator: RunningEmulator) -> None:
    """Where fake-gcs-server departs from the service, the simulator follows the service:
    rewrite and delete honour ifGenerationMatch, a rewrite's etag is new, a delete is 204."""
    def scenario(c: Client, bucket: str) -> list[Any]:
        _, src = _upload(c, bucket, "s", b"x")
        _upload(c, bucket, "taken", b"y")
        over = c.request("POST", f"/storage/v1/b/{bucket}/o/s/rewriteTo/b/{bucket}/o/taken"
                         "?ifGenerationMatch=0").status
        rewrite = c.request("POST", f"/storage/v1/b/{bucket}/o/s/rewriteTo/b/{bucket}/o/n")
        dst = rewrite.json()["resource"]
        wrong_gen = c.request("DELETE", gcs_object(bucket, "n") + "?ifGenerationMatch=1")
        delete = c.request("DELETE", gcs_object(bucket, "s"))
        move = c.request("POST", f"/storage/v1/b/{bucket}/o/taken/moveTo/o/m").status
        return [over, dst["etag"] == src["etag"], wrong_gen.status,
                (delete.status, delete.body), move]

    with CloudSim(service="gcs", latency_ms=0) as no_move:
        on_fake, on_sim = _gcs_both(no_move, gcs_emulator, scenario)
    # fake-gcs-server: the rewrite over "taken" and the delete of "n" with a wrong generation
    # are carried out (preconditions ignored), the etag is the MD5 (the same after a rewrite),
    # a delete answers 200 "null"; the move API is refused
    assert on_fake == [200, True, 200, (200, b"null\n"), 400]
    assert on_sim == [412, False, 412, (204, b""), 400]


def test_gcs_batch_alike(gcs: CloudSim, gcs_emulator: RunningEmulator) -> None:
    def scenario(c: Client, bucket: str) -> list[Any]:
        for name in ("x/1", "x/2"):
            _upload(c, bucket, name)
        parts = [f"DELETE {gcs_object(bucket, n)} HTTP/1.1\r\nContent-Type: application/json"
                 f"\r\n\r\n".encode() for n in ("x/1", "none", "x/2")]
        r = c.request("POST", "/batch/storage/v1", body=batch_body("BB", parts, gcs=True),
                      headers={"Content-Type": "multipart/mixed; boundary=BB"})
        answers = parse_batch_answer(r.headers["content-type"], r.body)
        left = c.request("GET", f"/storage/v1/b/{bucket}/o").json().get("items", [])
        return [r.status, [(m["content-id"], s) for m, s, _, _ in answers], left]

    on_fake, on_sim = _gcs_both(gcs, gcs_emulator, scenario)
    assert on_fake[0] == on_sim[0] == 200 and on_fake[2] == on_sim[2] == []
    # a delete's part: fake-gcs-server 200 ("null"), the service (and the simulator) 204
    assert on_fake[1] == [("<response-0>", 200), ("<response-1>", 404), ("<response-2>", 200)]
    assert on_sim[1] == [("<response-0>", 204), ("<response-1>", 404), ("<response-2>", 204)]


def test_gcs_batched_rewrites_alike(gcs: CloudSim, gcs_emulator: RunningEmulator) -> None:
    """Rewrites in a batch, as the GCS backend sends renames where the move API is refused:
    each part is the rewrite's own answer, and the objects end as after single rewrites."""
    def scenario(c: Client, bucket: str) -> list[Any]:
        for name in ("s/1", "s/2", "taken"):
            _upload(c, bucket, name, name.encode())
        parts = [f"POST /storage/v1/b/{bucket}/o/{quote(src, safe='')}/rewriteTo/b/{bucket}/o/"
                 f"{quote(dst, safe='')}?ifGenerationMatch=0 HTTP/1.1\r\nContent-Type: "
                 "application/json\r\nContent-Length: 0\r\n\r\n".encode()
                 for src, dst in (("s/1", "d/1"), ("none", "d/x"), ("s/2", "taken"))]
        r = c.request("POST", "/batch/storage/v1", body=batch_body("BB", parts, gcs=True),
                      headers={"Content-Type": "multipart/mixed; boundary=BB"})
        answers = parse_batch_answer(r.headers["content-type"], r.body)
        done = orjson.loads(answers[0][3])
        names = [o["name"] for o in c.request("GET", f"/storage/v1/b/{bucket}/o").json()
                 .get("items", [])]
        taken = c.request("GET", gcs_object(bucket, "taken") + "?alt=media").body
        return [r.status, [(m["content-id"], s) for m, s, _, _ in answers],
                (done["done"], done["resource"]["name"], done["resource"]["size"]), names,
                taken]

    on_fake, on_sim = _gcs_both(gcs, gcs_emulator, scenario)
    assert on_fake[0] == on_sim[0] == 200 and on_fake[2] == on_sim[2] == (True, "d/1", "3")
    assert on_fake[3] == on_sim[3] == ["d/1", "s/1", "s/2", "taken"]
    # the rewrite over an existing object: fake-gcs-server ignores ifGenerationMatch there
    # (the backend checks destinations first on endpoints that are not Google's)
    assert on_fake[1] == [("<response-0>", 200), ("<response-1>", 404), ("<response-2>", 200)]
    assert on_sim[1] == [("<response-0>", 200), ("<response-1>", 404), ("<response-2>", 412)]
    assert (on_fake[4], on_sim[4]) == (b"s/2", b"taken")


# -- Azure Data Lake (DFS): the ADLS stub and the simulator's namespace account ----------------


def test_data_lake_answers_as_the_adls_stub(adls: CloudSim) -> None:
    """The same Blob and DFS requests to the project's ADLS Gen2 stub (the reference the
    namespace path of the backend was written against) and to the simulator: the same
    statuses and error codes, and a rename keeps the etag on both."""
    from committer.testing.adls_stub import AdlsStub

    def scenario(blob: Client, dfs: Client, fs: str) -> list[Any]:
        def put(name: str) -> str:
            r = blob.request("PUT", blob_path(fs, name), body=b"x",
                             headers={"x-ms-blob-type": "BlockBlob"})
            assert r.status == 201, (r.status, r.body)
            return r.headers["etag"]

        def rename(src: str, dst: str, **headers: str) -> tuple[int, str | None]:
            r = dfs.request("PUT", blob_path(fs, dst) + "?mode=legacy",
                            headers={"x-ms-rename-source": f"/{fs}/{quote(src)}", **headers})
            return r.status, r.error_code

        etag = put("in/a")
        put("in/b")
        put("out/exists")
        out = [rename("in/a", "out/a", **{"If-None-Match": "*"}),
               blob.request("HEAD", blob_path(fs, "out/a")).headers.get("etag") == etag,
               rename("in/missing", "out/m"),
               rename("in/b", "nowhere/b"),
               rename("in/b", "out/exists", **{"If-None-Match": "*"})]
        mkdir = dfs.request("PUT", blob_path(fs, "d/e") + "?resource=directory")
        out.append(mkdir.status)
        put("d/e/f")
        out.append(dfs.request("DELETE", blob_path(fs, "d")).error_code)
        out.append(dfs.request("HEAD", blob_path(fs, "d/e")).headers.get("x-ms-resource-type"))
        out.append(dfs.request("DELETE", blob_path(fs, "d") + "?recursive=true").status)
        out.append(dfs.request("HEAD", blob_path(fs, "d")).status)
        out.append(blob.request("DELETE", blob_path(fs, "in")).error_code)  # not empty
        return out

    answers = []
    with AdlsStub(hierarchical=True) as stub:
        for blob_port, dfs_port in ((int(stub.blob_endpoint.split(":")[2].split("/")[0]),
                                     int(stub.dfs_endpoint.split(":")[2].split("/")[0])),
                                    (adls.ports["blob"], adls.ports["dfs"])):
            blob, dfs = Client(blob_port), Client(dfs_port)
            fs = f"c{uuid.uuid4().hex[:12]}"
            assert blob.request("PUT", blob_path(fs) + "?restype=container").status == 201
            answers.append(scenario(blob, dfs, fs))
            blob.close()
            dfs.close()
    on_stub, on_sim = answers
    assert on_stub == on_sim == [
        (201, None), True, (404, "SourcePathNotFound"),
        (404, "RenameDestinationParentPathNotFound"), (409, "PathAlreadyExists"),
        201, "DirectoryNotEmpty", "directory", 200, 404, "DirectoryIsNotEmpty"]
