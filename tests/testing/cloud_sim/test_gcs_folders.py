"""GCS buckets with a hierarchical namespace on the simulated account (``gcs_folders.py``):
folders, the objects in them, the folder rename and its long-running operation.

Each behaviour is pinned to the documentation it models:

- "About folders in buckets with hierarchical namespace enabled",
  https://cloud.google.com/storage/docs/folders-overview ("Folder metadata", "Considerations":
  every valid object name, ``dir1/`` an object in folder ``dir1/``; folders made with the
  objects under them);
- "Folder resource", https://cloud.google.com/storage/docs/json_api/v1/folders (insert with
  ``recursive``, get, delete of an empty folder, list);
- "Folder: rename", https://cloud.google.com/storage/docs/json_api/v1/folders/rename, and
  "Rename and move folders", https://cloud.google.com/storage/docs/rename-hns-folders (one
  atomic action moving the folder, its child folders and objects, metadata only; it starts a
  long-running operation);
- "Operations resource", https://cloud.google.com/storage/docs/json_api/v1/operations
  (``done``, then ``error`` or ``response``);
- "Objects: move", https://cloud.google.com/storage/docs/json_api/v1/objects/move ("If a
  destination folder doesn't exist, the move operation creates the folder along with the
  destination object ... and any necessary parent folders").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import quote

import orjson
import pytest

from committer.testing.cloud_sim import CloudSim, SimOptions
from tests.testing.cloud_sim.client import Client, Response, gcs_object


@pytest.fixture(scope="module")
def _hns() -> Iterator[CloudSim]:
    sim = CloudSim(SimOptions(service="gcs", latency_ms=0, gcs_hns=True, gcs_move=True,
                              seed=3)).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def hns(_hns: CloudSim) -> CloudSim:
    _hns.reset()
    return _hns


def _folder(name: str) -> str:
    return quote(name, safe="")


def _c(sim: CloudSim) -> Client:
    return Client(sim.ports["gcs"], sign=False)


def _upload(c: Client, name: str, data: bytes = b"x", bucket: str = "hb") -> Response:
    return c.request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name="
                             f"{quote(name, safe='')}", body=data,
                     headers={"Content-Type": "application/octet-stream"})


def _folders(c: Client, bucket: str = "hb", query: str = "") -> list[str]:
    r = c.request("GET", f"/storage/v1/b/{bucket}/folders{query}")
    assert r.status == 200, r.body
    return [f["name"] for f in r.json().get("items", [])]


def _new_bucket(c: Client, name: str = "hb", hns: bool = True) -> None:
    spec: dict[str, object] = {"name": name, "hierarchicalNamespace": {"enabled": hns}}
    if hns:
        spec["iamConfiguration"] = {"uniformBucketLevelAccess": {"enabled": True}}
    r = c.request("POST", "/storage/v1/b?project=sim", body=orjson.dumps(spec),
                  headers={"Content-Type": "application/json"})
    assert r.status == 200, r.body


def test_a_bucket_created_with_a_hierarchical_namespace_says_so(hns: CloudSim) -> None:
    """buckets/getStorageLayout: ``hierarchicalNamespace.enabled`` of the bucket, as its
    metadata says too."""
    c = _c(hns)
    _new_bucket(c, "made", hns=True)
    got = c.request("GET", "/storage/v1/b/made").json()
    assert got["hierarchicalNamespace"] == {"enabled": True}
    assert got["iamConfiguration"]["uniformBucketLevelAccess"]["enabled"] is True
    layout = c.request("GET", "/storage/v1/b/made/storageLayout").json()
    assert layout["kind"] == "storage#storageLayout" and layout["bucket"] == "made"
    assert layout["hierarchicalNamespace"] == {"enabled": True}
    _new_bucket(c, "plain", hns=False)
    flat = c.request("GET", "/storage/v1/b/plain/storageLayout").json()
    assert flat["hierarchicalNamespace"] == {"enabled": False}
    assert c.request("GET", "/storage/v1/b/none/storageLayout").status == 404


def test_objects_make_their_folders_which_stay_when_emptied(hns: CloudSim) -> None:
    """folders-overview: folders come with the objects under them, are kept when emptied,
    are no objects; ``dir1/`` is an object in folder ``dir1/``."""
    c = _c(hns)
    _new_bucket(c)
    assert _upload(c, "a/b/f.txt").status == 200
    assert _upload(c, "dir1/").status == 200  # a valid object name in such a bucket
    assert _folders(c) == ["a/", "a/b/", "dir1/"]
    assert c.request("DELETE", gcs_object("hb", "a/b/f.txt")).status == 204
    assert _folders(c) == ["a/", "a/b/", "dir1/"]  # emptied, kept
    listing = c.request("GET", "/storage/v1/b/hb/o").json()
    assert [o["name"] for o in listing.get("items", [])] == ["dir1/"]  # folders: no objects
    # with a delimiter, an empty folder is a prefix only when asked
    plain = c.request("GET", "/storage/v1/b/hb/o?delimiter=%2F").json()
    assert plain.get("prefixes", []) == ["dir1/"]
    asked = c.request("GET", "/storage/v1/b/hb/o?delimiter=%2F&includeFoldersAsPrefixes=true")
    assert asked.json()["prefixes"] == ["a/", "dir1/"]


def test_folders_created_got_listed_and_deleted_only_when_empty(hns: CloudSim) -> None:
    """json_api/v1/folders: insert (``recursive`` makes the parents), get, list with a prefix
    and a delimiter, delete of an empty folder only."""
    c = _c(hns)
    _new_bucket(c)

    def create(name: str, query: str = "") -> Response:
        return c.request("POST", f"/storage/v1/b/hb/folders{query}",
                         body=orjson.dumps({"name": name}),
                         headers={"Content-Type": "application/json"})

    assert create("x/y/").status == 404  # its parent is missing
    made = create("x/y/", "?recursive=true")
    assert made.status == 200
    folder = made.json()
    assert folder["kind"] == "storage#folder" and folder["name"] == "x/y/"
    assert folder["bucket"] == "hb" and folder["id"] == "hb/x/y/"
    assert create("x/y/").status == 409
    got = c.request("GET", f"/storage/v1/b/hb/folders/{_folder('x/y/')}")
    assert got.status == 200 and got.json()["name"] == "x/y/"
    assert c.request("GET", f"/storage/v1/b/hb/folders/{_folder('nope/')}").status == 404
    create("x/z/")
    assert _folders(c, query="?prefix=x%2F") == ["x/", "x/y/", "x/z/"]
    assert _folders(c, query="?delimiter=%2F") == ["x/"]
    _upload(c, "x/y/f")
    assert c.request("DELETE", f"/storage/v1/b/hb/folders/{_folder('x/y/')}").status == 409
    assert c.request("DELETE", gcs_object("hb", "x/y/f")).status == 204
    assert c.request("DELETE", f"/storage/v1/b/hb/folders/{_folder('x/y/')}").status == 204
    assert _folders(c) == ["x/", "x/z/"]


def test_a_bucket_without_hierarchical_namespace_has_no_folders(hns: CloudSim) -> None:
    c = _c(hns)
    _new_bucket(c, "flat", hns=False)
    assert c.request("GET", "/storage/v1/b/flat/folders").status == 400
    _upload(c, "a/f", bucket="flat")
    assert c.request("DELETE", gcs_object("flat", "a/f")).status == 204
    # a flat bucket's "directories" are only names: gone with the last object
    assert hns.objects("flat") == []


def test_a_move_makes_the_destination_s_folders(hns: CloudSim) -> None:
    """objects/move: the destination's folder, and its parents, are created with it."""
    c = _c(hns)
    _new_bucket(c)
    _upload(c, "src/f", b"payload")
    r = c.request("POST", f"{gcs_object('hb', 'src/f')}/moveTo/o/{quote('p=1/q=2/f', safe='')}")
    assert r.status == 200
    assert _folders(c) == ["p=1/", "p=1/q=2/", "src/"]


def _wait(c: Client, operation: dict[str, object], bucket: str = "hb") -> dict[str, object]:
    name = str(operation["name"])
    assert name.startswith(f"projects/_/buckets/{bucket}/operations/")
    op_id = name.rsplit("/", 1)[1]
    deadline = time.monotonic() + 30
    while not operation["done"]:
        assert time.monotonic() < deadline, "the rename's operation never finished"
        time.sleep(0.01)
        r = c.request("GET", f"/storage/v1/b/{bucket}/operations/{op_id}")
        assert r.status == 200, r.body
        operation = r.json()
    return operation


def test_a_folder_rename_moves_everything_below_it_as_one_long_running_operation() -> None:
    """folders/rename and rename-hns-folders: one atomic action, metadata only (the objects
    keep their bytes and checksums), answered with a long-running operation read until it is
    done; what the request cannot do is refused at once."""
    with CloudSim(service="gcs", latency_ms=30, p99_ms=30, gcs_hns=True, seed=2) as sim:
        c = _c(sim)
        _new_bucket(c)
        for name in ("t/a/1", "t/a/2", "t/a/sub/3", "keep/x"):
            assert _upload(c, name, name.encode()).status == 200
        c.request("POST", "/storage/v1/b/hb/folders?recursive=true",
                  body=orjson.dumps({"name": "t/a/empty/"}))
        before = {o["key"]: o["md5"] for o in sim.objects("hb") if not o["is_dir"]}
        r = c.request("POST", f"/storage/v1/b/hb/folders/{_folder('t/a/')}/renameTo/folders/"
                              f"{_folder('dest/a/')}")
        assert r.status == 404  # the destination's parent folder "dest/" is missing
        c.request("POST", "/storage/v1/b/hb/folders", body=orjson.dumps({"name": "dest/"}))
        r = c.request("POST", f"/storage/v1/b/hb/folders/{_folder('t/a/')}/renameTo/folders/"
                              f"{_folder('dest/a/')}")
        assert r.status == 200
        operation = r.json()
        assert operation["kind"] == "storage#operation" and operation["done"] is False
        meta = operation["metadata"]
        assert meta["sourceFolderId"] == "t/a/" and meta["destinationFolderId"] == "dest/a/"
        done = _wait(c, operation)
        assert "error" not in done and done["response"]["name"].endswith(  # type: ignore[index]
            "/folders/dest/a/")
        after = {o["key"]: o["md5"] for o in sim.objects("hb") if not o["is_dir"]}
        assert after == {k.replace("t/a/", "dest/a/"): v for k, v in before.items()}
        assert _folders(c) == ["dest/", "dest/a/", "dest/a/empty/", "dest/a/sub/", "keep/",
                               "t/"]
        # refused at the request: a source that is gone, a destination that exists
        again = c.request("POST", f"/storage/v1/b/hb/folders/{_folder('t/a/')}/renameTo/"
                                  f"folders/{_folder('dest/b/')}")
        assert again.status == 404
        taken = c.request("POST", f"/storage/v1/b/hb/folders/{_folder('keep/')}/renameTo/"
                                  f"folders/{_folder('dest/a/')}")
        assert taken.status == 409
        assert taken.json()["error"]["errors"][0]["reason"] == "conflict"
        assert c.request("GET", "/storage/v1/b/hb/operations/nosuch").status == 404
