"""The Data Lake (DFS) endpoint over raw HTTP: rename, create, delete, properties, list paths,
with the ADLS stub's status codes."""

from __future__ import annotations

from urllib.parse import quote

from committer.testing.cloud_sim import CloudSim
from tests.testing.cloud_sim.client import ACCOUNT, Client, data_lake_file_system


def _dfs(sim: CloudSim) -> Client:
    return Client(sim.ports["dfs"])


def _path(fs: str, path: str = "") -> str:
    return f"/{ACCOUNT}/{fs}" + (f"/{quote(path)}" if path else "")


def _setup(sim: CloudSim, *files: str) -> Client:
    c = _dfs(sim)
    assert c.request("PUT", _path("fs") + "?resource=filesystem").status == 201
    for f in files:
        assert c.request("PUT", _path("fs", f) + "?resource=file").status == 201
    return c


def _rename(c: Client, src: str, dst: str, **headers: str) -> tuple[int, str | None]:
    h = {"x-ms-rename-source": f"/fs/{quote(src)}", **headers}
    r = c.request("PUT", _path("fs", dst) + "?mode=legacy", headers=h)
    return r.status, r.error_code


def test_rename_keeps_etag_and_modification_time(adls: CloudSim) -> None:
    c = _setup(adls, "a/f 1%3A", "b/keep")
    before = c.request("HEAD", _path("fs", "a/f 1%3A"))
    r = c.request("PUT", _path("fs", "b/g") + "?mode=legacy",
                  headers={"x-ms-rename-source": f"/fs/{quote('a/f 1%3A')}",
                           "If-None-Match": "*"})
    assert r.status == 201
    assert r.headers["etag"] == before.headers["etag"]
    assert r.headers["last-modified"] == before.headers["last-modified"]
    assert c.request("HEAD", _path("fs", "a/f 1%3A")).status == 404
    after = c.request("HEAD", _path("fs", "b/g"))
    assert after.headers["etag"] == before.headers["etag"]
    assert {o["key"] for o in adls.objects("fs")} == {"a", "b", "b/g", "b/keep"}


def test_rename_refusals(adls: CloudSim) -> None:
    c = _setup(adls, "a/f", "a/g", "d/inner")
    assert _rename(c, "a/none", "a/x") == (404, "SourcePathNotFound")
    assert _rename(c, "a/f", "nodir/x") == (404, "RenameDestinationParentPathNotFound")
    assert _rename(c, "a/f", "a/g", **{"If-None-Match": "*"}) == (409, "PathAlreadyExists")
    assert _rename(c, "a/f", "d") == (409, "PathConflict")  # a file over a directory
    assert _rename(c, "a/f", "a/f/x") == (409, "PathConflict")  # a file in the way
    assert _rename(c, "a", "a/sub") == (400, "InvalidDestinationPath")
    assert _rename(c, "a/f", "a/h", **{"x-ms-source-if-match": '"0x1"'}) == (
        412, "SourceConditionNotMet")
    assert _rename(c, "a/f", "a/g", **{"If-Match": '"0x1"'}) == (412, "ConditionNotMet")
    assert _rename(c, "a/f", "a/f") == (201, None)  # onto itself: nothing changes
    bad = c.request("PUT", _path("fs", "a/y"), headers={"x-ms-rename-source": "/"})
    assert (bad.status, bad.error_code) == (400, "InvalidSourceUri")
    gone = c.request("PUT", _path("fs", "a/y"), headers={"x-ms-rename-source": "/nofs/a/f"})
    assert (gone.status, gone.error_code) == (404, "FilesystemNotFound")
    assert b'"code": "FilesystemNotFound"' in gone.body  # DFS errors are JSON
    # nothing moved
    assert {o["key"] for o in adls.objects("fs") if not o["is_dir"]} == {"a/f", "a/g",
                                                                         "d/inner"}


def test_rename_without_condition_replaces_a_file(adls: CloudSim) -> None:
    c = _setup(adls, "a/f", "a/g")
    etag = c.request("HEAD", _path("fs", "a/f")).headers["etag"]
    assert _rename(c, "a/f", "a/g") == (201, None)
    assert c.request("HEAD", _path("fs", "a/g")).headers["etag"] == etag
    assert adls.stats()["stored"]["objects"] == 1


def test_a_directory_moves_with_its_subtree(adls: CloudSim) -> None:
    c = _setup(adls, "t/1/x", "t/1/y/z", "other/f")
    assert _rename(c, "t/1", "other/moved", **{"If-None-Match": "*"}) == (201, None)
    assert [o["key"] for o in adls.objects("fs", "other/")] == [
        "other/f", "other/moved", "other/moved/x", "other/moved/y", "other/moved/y/z"]
    assert [o["key"] for o in adls.objects("fs", "t")] == ["t"]
    assert _rename(c, "other/f", "other/moved") == (409, "PathConflict")


def test_create_directories_and_files(adls: CloudSim) -> None:
    c = _setup(adls, "f")
    r = c.request("PUT", _path("fs", "x/y/z") + "?resource=directory")
    assert r.status == 201 and r.headers["etag"]
    assert [(o["key"], o["is_dir"]) for o in adls.objects("fs", "x")] == [
        ("x", True), ("x/y", True), ("x/y/z", True)]
    again = c.request("PUT", _path("fs", "x/y") + "?resource=directory")
    assert again.status == 201  # an existing directory is kept
    assert [o["key"] for o in adls.objects("fs", "x/y/")] == ["x/y/z"]
    assert c.request("PUT", _path("fs", "f/sub") + "?resource=directory").error_code == \
        "PathConflict"
    assert c.request("PUT", _path("fs", "f") + "?resource=directory").error_code == \
        "PathConflict"
    assert c.request("PUT", _path("fs", "x") + "?resource=file").error_code == "PathConflict"
    r = c.request("PUT", _path("fs", "f") + "?resource=file", headers={"If-None-Match": "*"})
    assert (r.status, r.error_code) == (409, "PathAlreadyExists")
    props = c.request("HEAD", _path("fs", "x/y"))
    assert props.status == 200 and props.headers["x-ms-resource-type"] == "directory"
    props = c.request("HEAD", _path("fs", "f"))
    assert props.headers["x-ms-resource-type"] == "file"
    assert props.headers["content-length"] == "0"
    missing = c.request("HEAD", _path("fs", "nope"))
    assert (missing.status, missing.error_code, missing.body) == (404, "PathNotFound", b"")


def test_delete_paths(adls: CloudSim) -> None:
    c = _setup(adls, "d/e/f", "g")
    r = c.request("DELETE", _path("fs", "d"))
    assert (r.status, r.error_code) == (409, "DirectoryNotEmpty")
    assert c.request("DELETE", _path("fs", "d") + "?recursive=true").status == 200
    assert c.request("DELETE", _path("fs", "g")).status == 200
    r = c.request("DELETE", _path("fs", "g"))
    assert (r.status, r.error_code) == (404, "PathNotFound")
    assert adls.objects("fs") == []
    assert adls.stats()["stored"] == {"objects": 0, "directories": 0, "buckets": 1}


def test_list_paths(adls: CloudSim) -> None:
    c = _setup(adls, "d/a", "d/b/c", "d/e", "z")
    r = c.request("GET", _path("fs") + "?resource=filesystem&directory=d&recursive=false")
    assert r.status == 200
    paths = r.json()["paths"]
    assert [(p["name"], p.get("isDirectory")) for p in paths] == [
        ("d/a", None), ("d/b", "true"), ("d/e", None)]
    assert {"contentLength", "etag", "lastModified"} <= set(paths[0])
    names: list[str] = []
    token = ""
    while True:
        q = "?resource=filesystem&recursive=true&maxResults=2" + (
            f"&continuation={quote(token)}" if token else "")
        r = c.request("GET", _path("fs") + q)
        names += [p["name"] for p in r.json()["paths"]]
        token = r.headers.get("x-ms-continuation", "")
        if not token:
            break
    assert names == ["d", "d/a", "d/b", "d/b/c", "d/e", "z"]
    r = c.request("GET", _path("fs") + "?resource=filesystem&directory=nope")
    assert (r.status, r.error_code) == (404, "PathNotFound")


def test_flat_account_refuses_the_dfs_endpoint(blob: CloudSim) -> None:
    r = _dfs(blob).request("PUT", _path("fs", "a") + "?resource=directory")
    assert (r.status, r.error_code) == (400, "HierarchicalNamespaceNotEnabled")


def test_sdk_data_lake_rename(adls: CloudSim) -> None:
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceExistsError

    fs = data_lake_file_system(adls.connection_string, adls.dfs_endpoint, "lake")
    fs.create_directory("in/sub")
    fs.create_file("in/sub/a b")
    fs.get_file_client("in/sub/a b").rename_file("lake/in/c",
                                                 match_condition=MatchConditions.IfMissing)
    fs.create_file("in/sub/d")
    try:
        fs.get_file_client("in/sub/d").rename_file("lake/in/c",
                                                   match_condition=MatchConditions.IfMissing)
        raise AssertionError("renamed over an existing file")
    except ResourceExistsError:
        pass
    fs.get_directory_client("in/sub").rename_directory("lake/out")
    assert sorted(p.name for p in fs.get_paths()) == ["in", "in/c", "out", "out/d"]
