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


# -- what Hadoop's ABFS connector leans on (each from the service's documentation) ----------


def test_append_then_flush_writes_a_file(adls: CloudSim) -> None:
    """"Path - Update": appended data is uploaded at its ``position`` and written only by a
    flush whose position is the file's length once all of it is in, the uploaded data
    contiguous; data may be uploaded in parallel, in any order."""
    c = _setup(adls, "f")
    created = c.request("HEAD", _path("fs", "f")).headers["etag"]
    # Uploaded out of order; nothing is written before the flush.
    assert c.request("PATCH", _path("fs", "f") + "?action=append&position=3",
                     body=b"def").status == 202
    assert c.request("PATCH", _path("fs", "f") + "?action=append&position=0",
                     body=b"abc").status == 202
    assert c.request("HEAD", _path("fs", "f")).headers["content-length"] == "0"
    # A flush at any other position than the end of contiguous data is refused, no change.
    for wrong in (2, 7):
        r = c.request("PATCH", _path("fs", "f") + f"?action=flush&position={wrong}")
        assert (r.status, r.error_code) == (400, "InvalidFlushPosition")
    flushed = c.request("PATCH", _path("fs", "f") +
                        "?action=flush&position=6&retainUncommittedData=false&close=true")
    assert flushed.status == 200
    assert flushed.headers["etag"] != created  # a flush is a new version
    assert c.request("GET", _path("fs", "f")).body == b"abcdef"
    # The service computes no MD5 of flushed data; a flush may give one to keep.
    assert "content-md5" not in c.request("HEAD", _path("fs", "f")).headers
    # Appending to a written file starts at its length.
    r = c.request("PATCH", _path("fs", "f") + "?action=append&position=2", body=b"x")
    assert (r.status, r.error_code) == (400, "InvalidFlushPosition")
    assert c.request("PATCH", _path("fs", "f") + "?action=append&position=6",
                     body=b"gh").status == 202
    md5 = "6NxAgbE0NLRRiacgt3toGA=="  # base64 MD5 of "abcdefgh"
    assert c.request("PATCH", _path("fs", "f") + "?action=flush&position=8",
                     headers={"x-ms-content-md5": md5}).status == 200
    head = c.request("HEAD", _path("fs", "f")).headers
    assert (head["content-length"], head["content-md5"]) == ("8", md5)
    missing = c.request("PATCH", _path("fs", "none") + "?action=append&position=0", body=b"a")
    assert (missing.status, missing.error_code) == (404, "PathNotFound")


def test_patch_named_by_method_override(adls: CloudSim) -> None:
    """A client without PATCH (Java's HttpURLConnection, which ABFS uses) sends PUT with
    ``X-HTTP-Method-Override: PATCH``, signed as the PUT it is."""
    c = _setup(adls, "f")
    over = {"X-HTTP-Method-Override": "PATCH"}
    assert c.request("PUT", _path("fs", "f") + "?action=append&position=0", body=b"ab",
                     headers=over).status == 202
    assert c.request("PUT", _path("fs", "f") + "?action=flush&position=2",
                     headers=over).status == 200
    assert c.request("GET", _path("fs", "f")).body == b"ab"


def test_read_ranges_and_unquoted_etags(adls: CloudSim) -> None:
    """"Path - Read" with a range; "Specifying conditional headers for Blob service
    operations": since version 2011-08-18 an etag in If-Match *can* be quoted, so a bare
    one (as ABFS sends the etag of a listing, which has no quotes) matches too."""
    c = _setup(adls, "f")
    c.request("PATCH", _path("fs", "f") + "?action=append&position=0", body=b"0123456789")
    c.request("PATCH", _path("fs", "f") + "?action=flush&position=10")
    etag = c.request("HEAD", _path("fs", "f")).headers["etag"]
    assert etag.startswith('"')
    listed = c.request("GET", _path("fs") + "?resource=filesystem&recursive=false")
    bare = listed.json()["paths"][0]["etag"]
    assert bare == etag.strip('"')
    for given in (etag, bare, f'"0x1", {bare}'):
        r = c.request("GET", _path("fs", "f"), headers={"Range": "bytes=2-4",
                                                        "If-Match": given})
        assert (r.status, r.body) == (206, b"234"), given
        assert r.headers["content-range"] == "bytes 2-4/10"
    r = c.request("GET", _path("fs", "f"), headers={"Range": "bytes=8-100"})
    assert (r.status, r.body) == (206, b"89")
    r = c.request("GET", _path("fs", "f"), headers={"If-Match": "0x1"})
    assert (r.status, r.error_code) == (412, "ConditionNotMet")
    r = c.request("PUT", _path("fs", "f") + "?resource=file", headers={"If-None-Match": bare})
    assert r.status == 412


def test_status_and_access_control_of_paths_and_the_root(adls: CloudSim) -> None:
    """"Path - Get Properties": ``action=getStatus`` gives the system properties,
    ``getAccessControl`` the owner, group, permissions and ACL too (a namespace account
    only: ABFS asks it of the filesystem's root to learn whether the account has one; the
    flat account's DFS endpoint refuses it, 400)."""
    c = _setup(adls, "d/f")
    root = c.request("HEAD", f"/{ACCOUNT}/fs/?upn=false&action=getAccessControl&timeout=90")
    assert root.status == 200
    assert root.headers["x-ms-resource-type"] == "directory"
    assert root.headers["x-ms-permissions"] == "rwxr-x---"
    assert root.headers["x-ms-acl"].startswith("user::rwx,")
    assert c.request("HEAD", f"/{ACCOUNT}/fs?action=getStatus").status == 200
    f = c.request("HEAD", _path("fs", "d/f") + "?upn=false&action=getStatus")
    assert f.headers["x-ms-resource-type"] == "file"
    assert (f.headers["x-ms-owner"], f.headers["x-ms-permissions"]) == ("$superuser",
                                                                        "rw-r-----")
    assert "x-ms-acl" not in f.headers
    listed = c.request("GET", _path("fs") + "?resource=filesystem&recursive=true")
    assert {p["name"]: p["permissions"] for p in listed.json()["paths"]} == {
        "d": "rwxr-x---", "d/f": "rw-r-----"}


def test_flat_account_refuses_the_namespace_probe(blob: CloudSim) -> None:
    r = _dfs(blob).request("HEAD", f"/{ACCOUNT}/fs/?upn=false&action=getAccessControl")
    assert r.status == 400  # ABFS takes a 400 here for "no namespace"
