"""The simulator against the clients users run: gcsfs on the GCS JSON API, adlfs on both Azure
account kinds, and the Azure Data Lake SDK on the namespace account. Each client uploads, reads,
lists, moves and deletes as it does against the service, through its own request code."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from fsspec.asyn import sync

from committer.testing.cloud_sim import CloudSim
from tests.testing.cloud_sim.client import data_lake_file_system

# gcsfs would otherwise ask the bucket for its hierarchical-namespace layout first
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def _gcsfs(sim: CloudSim) -> Any:
    import gcsfs

    return gcsfs.GCSFileSystem(endpoint_url=sim.gcs_endpoint, token="anon",
                               skip_instance_cache=True, retries=1)


def _adlfs(sim: CloudSim) -> Any:
    import adlfs

    return adlfs.AzureBlobFileSystem(connection_string=sim.connection_string,
                                     skip_instance_cache=True)


def test_gcsfs_uploads_reads_lists_moves_and_deletes(gcs: CloudSim) -> None:
    fs = _gcsfs(gcs)
    bucket = f"b{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    # a multipart/related upload with LF line breaks; bytes at the end that look like them
    fs.pipe(f"{bucket}/in/a.bin", b"first\r\n")
    fs.pipe({f"{bucket}/in/b": b"\n", f"{bucket}/in/sub/c": b"ccc"})
    assert fs.cat(f"{bucket}/in/a.bin") == b"first\r\n"
    assert fs.cat(f"{bucket}/in/b") == b"\n"
    assert fs.info(f"{bucket}/in/sub/c")["size"] == 3
    assert sorted(fs.ls(f"{bucket}/in", detail=False)) == [
        f"{bucket}/in/a.bin", f"{bucket}/in/b", f"{bucket}/in/sub"]
    fs.mv(f"{bucket}/in/a.bin", f"{bucket}/out/a.bin")
    fs.mv(f"{bucket}/in/sub", f"{bucket}/out/sub", recursive=True)
    assert fs.find(bucket) == [f"{bucket}/in/b", f"{bucket}/out/a.bin",
                               f"{bucket}/out/sub/c"]
    assert fs.cat(f"{bucket}/out/a.bin") == b"first\r\n"
    # on Google, gcsfs deletes several paths in one batch (LF line breaks, no blank line
    # after a part's head); off it (an endpoint_url), one request each
    deleted = sync(fs.loop, fs._rm_files, [f"{bucket}/in/b", f"{bucket}/out/a.bin"])
    assert deleted == [f"{bucket}/in/b", f"{bucket}/out/a.bin"]
    assert fs.find(bucket) == [f"{bucket}/out/sub/c"]
    fs.rm(f"{bucket}/out", recursive=True)
    assert fs.find(bucket) == []
    assert gcs.stats()["by_op"].get("gcs_batch", 0) >= 1


def test_adlfs_uploads_reads_lists_moves_and_deletes(azure: CloudSim) -> None:
    fs = _adlfs(azure)
    container = f"c{uuid.uuid4().hex[:10]}"
    fs.mkdir(container)
    fs.pipe(f"{container}/in/a.bin", b"first\r\n")
    fs.pipe({f"{container}/in/b": b"bb", f"{container}/in/sub/c": b"ccc"})
    assert fs.cat(f"{container}/in/a.bin") == b"first\r\n"
    assert fs.info(f"{container}/in/sub/c")["size"] == 3
    assert sorted(fs.ls(f"{container}/in", detail=False)) == [
        f"{container}/in/a.bin", f"{container}/in/b", f"{container}/in/sub"]
    fs.mv(f"{container}/in/a.bin", f"{container}/out/a.bin")
    assert fs.cat(f"{container}/out/a.bin") == b"first\r\n"
    assert not fs.exists(f"{container}/in/a.bin")
    assert sorted(fs.find(f"{container}/in")) == [f"{container}/in/b",
                                                  f"{container}/in/sub/c"]
    fs.rm([f"{container}/in/b", f"{container}/out/a.bin"])
    assert fs.find(f"{container}/out") == []
    fs.rm(f"{container}/in", recursive=True)
    assert fs.find(container) == []


def test_data_lake_sdk_directories(adls: CloudSim) -> None:
    from azure.core.exceptions import ResourceNotFoundError

    fs = data_lake_file_system(adls.connection_string, adls.dfs_endpoint, "dl")
    top = fs.create_directory("job/attempt/task")
    top.create_file("part-0")
    fs.create_directory("job/attempt/empty")
    props = fs.get_directory_client("job/attempt").get_directory_properties()
    assert props.name == "job/attempt" and props.etag and props.last_modified
    with pytest.raises(ResourceNotFoundError):  # as the service: the parent must exist
        fs.get_directory_client("job/attempt").rename_directory("dl/table/done")
    fs.create_directory("table")
    fs.get_directory_client("job/attempt").rename_directory("dl/table/done")
    listed = {p.name: p.is_directory for p in fs.get_paths("table", recursive=True)}
    assert listed == {"table/done": True, "table/done/empty": True,
                      "table/done/task": True, "table/done/task/part-0": False}
    assert [p.name for p in fs.get_paths("table", recursive=False)] == ["table/done"]
    file_props = fs.get_file_client("table/done/task/part-0").get_file_properties()
    assert file_props.size == 0 and file_props.etag
    with pytest.raises(ResourceNotFoundError):
        fs.get_directory_client("job/attempt").get_directory_properties()
    fs.get_directory_client("table").delete_directory()
    assert [p.name for p in fs.get_paths(recursive=True)] == ["job"]
