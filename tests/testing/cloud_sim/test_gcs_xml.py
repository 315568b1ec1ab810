"""The GCS XML API's copy and delete, as obstore's GCS store sends them: a copy keeps the
bytes and checksums, a precondition on the destination is honoured, a missing object is an
XML 404, and obstore itself (in a child process) copies and deletes against the simulator."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import pytest

from committer.testing.cloud_sim import CloudSim
from tests.testing.cloud_sim.client import Client


def _put(c: Client, bucket: str, key: str, source: str, **headers: str) -> tuple[int, bytes]:
    r = c.request("PUT", f"/{bucket}/{quote(key, safe='')}",
                  headers={"x-goog-copy-source": f"{bucket}/{quote(source, safe='')}",
                           **headers})
    return r.status, r.body


def test_copy_and_delete_over_raw_http(gcs: CloudSim) -> None:
    (answer,) = gcs.populate([{"bucket": "bk", "key": "src/a b.txt", "data_b64": "aGVsbG8="}])
    c = Client(gcs.ports["gcs"], sign=False)
    status, body = _put(c, "bk", "dst/x=1/a.txt", "src/a b.txt")
    assert status == 200 and b"<CopyObjectResult>" in body
    copied = {o["key"]: o for o in gcs.objects("bk")}["dst/x=1/a.txt"]
    assert copied["size"] == 5 and copied["md5"] == answer["md5"]
    # the destination exists now: a copy that requires none is refused, as the service does
    status, body = _put(c, "bk", "dst/x=1/a.txt", "src/a b.txt",
                        **{"x-goog-if-generation-match": "0"})
    assert status == 412 and b"<Code>PreconditionFailed</Code>" in body
    status, body = _put(c, "bk", "dst/b.txt", "src/missing")
    assert status == 404 and b"<Code>NoSuchKey</Code>" in body
    assert c.request("DELETE", f"/bk/{quote('src/a b.txt', safe='')}").status == 204
    assert c.request("DELETE", f"/bk/{quote('src/a b.txt', safe='')}").status == 404
    assert sorted(o["key"] for o in gcs.objects("bk")) == ["dst/x=1/a.txt"]


_OBSTORE_MOVE = """
import asyncio, os, sys
import obstore
from obstore.store import GCSStore

store = GCSStore("bk", base_url=sys.argv[1], bearer_token="sim",
                 client_options={"allow_http": True})

async def move_all() -> None:
    await asyncio.gather(*(obstore.copy_async(store, f"src/f{i}", f"dst/p={i % 3}/f{i}")
                           for i in range(20)))
    await asyncio.gather(*(obstore.delete_async(store, f"src/f{i}") for i in range(20)))

asyncio.run(move_all())
sys.stdout.flush()
os._exit(0)  # obstore's runtime can abort while the interpreter finalizes
"""


def test_obstore_copies_and_deletes(gcs: CloudSim) -> None:
    # a benchmark peer's client (the bench extra), not installed on Python 3.10 (pyproject.toml)
    pytest.importorskip("obstore")
    gcs.populate({"bucket": "bk", "key": f"src/f{i}", "size": 10 + i} for i in range(20))
    done = subprocess.run([sys.executable, "-c", _OBSTORE_MOVE, gcs.gcs_endpoint],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = {o["key"]: o["size"] for o in gcs.objects("bk")}
    assert found == {f"dst/p={i % 3}/f{i}": 10 + i for i in range(20)}
