"""The GCS backend's objects-move path, against fake-gcs-server behind the moveTo proxy.

fake-gcs-server refuses ``moveTo`` (400), so the backend falls back to rewrite + delete there;
``committer.testing.gcs_move_proxy`` implements the move in front of it (atomic through the
proxy, preconditions honoured) so that the path the backend takes on the real service runs.
What is checked: a rename is one move request carrying ``ifGenerationMatch=0``; an existing
destination is never replaced; an answer lost after the move happened is recovered only on the
recorded checksum and size; throttled moves are retried; and the proxy itself answers the
move's preconditions as the API documents them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote, urlencode

import pytest

from committer import statistics as st
from committer.errors import AmbiguousRenameError, PathExistsError, PathNotFoundError
from tests.store.stub_fixtures import GcsMoveTarget

pytestmark = pytest.mark.emulator


def _client_renames(target: GcsMoveTarget) -> list[str]:
    assert target.proxy is not None
    return [op for op in target.proxy.ops() if op in ("move", "rewrite", "copy")]


def _generation(target: GcsMoveTarget, name: str) -> str:
    obj = target.object(name)
    assert obj is not None, name
    return str(obj["generation"])


def test_rename_is_one_move_request(gcs_move: GcsMoveTarget) -> None:
    backend = gcs_move.backend()
    store = gcs_move.managed(backend)
    src, dst = gcs_move.url("job", "part 0.csv"), gcs_move.url("out", "p=1", "part 0.csv")
    store.write_bytes(src, b"a,b\n")
    before = store.stat(src)
    source_generation = _generation(gcs_move, "job/part 0.csv")
    assert gcs_move.proxy is not None
    gcs_move.proxy.reset_log()

    store.rename_file(src, dst, size=before.size, etag=store.identity(before))

    assert _client_renames(gcs_move) == ["move"]
    assert "delete" not in gcs_move.proxy.ops()  # the move is the whole rename
    [move] = [r for r in gcs_move.proxy.requests if r.op == "move"]
    assert move.query == {"ifGenerationMatch": "0"}
    assert move.headers.get("X-Goog-GCS-Idempotency-Token")
    assert backend._move_supported is True
    after = store.stat(dst)
    assert (after.size, after.checksum) == (before.size, before.checksum)
    assert _generation(gcs_move, "out/p=1/part 0.csv") != source_generation
    assert gcs_move.object("job/part 0.csv") is None
    assert store.read_bytes(dst) == b"a,b\n"


def test_move_never_replaces_an_existing_destination(gcs_move: GcsMoveTarget) -> None:
    store = gcs_move.managed()
    src, dst = gcs_move.url("in", "f"), gcs_move.url("out", "f")
    store.write_bytes(dst, b"newer, someone else's")
    store.write_bytes(src, b"mine")
    kept = _generation(gcs_move, "out/f")
    with pytest.raises(PathExistsError):
        store.rename_file(src, dst)
    assert _generation(gcs_move, "out/f") == kept
    assert store.read_bytes(dst) == b"newer, someone else's"
    assert store.read_bytes(src) == b"mine"
    assert _client_renames(gcs_move) == ["move"]  # refused (412); no rewrite fallback

    # The explicit last-writer-wins variant moves without the precondition and replaces.
    store.replace_file(src, dst)
    assert store.read_bytes(dst) == b"mine" and not store.exists(src)
    assert _generation(gcs_move, "out/f") != kept


def test_destination_with_the_same_bytes_completes_without_replacing(
        gcs_move: GcsMoveTarget) -> None:
    """A destination holding exactly the source's bytes (an earlier copy-based attempt of this
    rename that lost its delete) is accepted: the source is deleted, the destination kept."""
    store = gcs_move.managed()
    src, dst = gcs_move.url("in", "f"), gcs_move.url("out", "f")
    store.write_bytes(dst, b"same")
    store.write_bytes(src, b"same")
    kept = _generation(gcs_move, "out/f")
    store.rename_file(src, dst)
    assert not store.exists(src)
    assert _generation(gcs_move, "out/f") == kept


def test_rename_of_missing_source_is_not_found(gcs_move: GcsMoveTarget) -> None:
    store = gcs_move.managed()
    with pytest.raises(PathNotFoundError):
        store.rename_file(gcs_move.url("nope"), gcs_move.url("dest"))
    assert not store.exists(gcs_move.url("dest"))


def test_lost_answer_is_recovered_only_on_matching_checksum(gcs_move: GcsMoveTarget) -> None:
    """HADOOP-18012 on the move path: the move happened and the connection dropped before its
    answer. The retry finds the source gone and does not move again; the destination counts as
    the file only if its checksum and size are the ones recorded (a move makes a new generation
    and, on the service, a new etag, so neither can prove it)."""
    store = gcs_move.managed()
    proxy = gcs_move.proxy
    assert proxy is not None

    def lost_move(name: str, data: bytes, recorded: str | None, size: int) -> None:
        src, dst = gcs_move.url("src", name), gcs_move.url("dst", name)
        store.write_bytes(src, data)
        proxy.faults.lose("move")
        store.rename_file(src, dst, size=size, etag=recorded)

    data = b"exactly these bytes"
    store.write_bytes(gcs_move.url("probe"), data)
    probe = store.stat(gcs_move.url("probe"))
    identity = store.identity(probe)
    assert identity is not None and identity.startswith("md5:")

    proxy.reset_log()
    lost_move("good", data, identity, len(data))
    assert store.stats.counter(st.RENAME_RECOVERED) == 1
    assert store.read_bytes(gcs_move.url("dst", "good")) == data
    assert proxy.ops().count("move") == 1  # recognised, not repeated
    assert proxy.faults.fired == [("move", "lose")]

    with pytest.raises(AmbiguousRenameError):  # the etag proves nothing on a move
        lost_move("by-etag", data, probe.etag, len(data))
    with pytest.raises(AmbiguousRenameError):  # same size, other bytes
        lost_move("other", b"exactly those bytes", identity, len(data))
    with pytest.raises(AmbiguousRenameError):  # right checksum, wrong size
        lost_move("size", data, identity, len(data) + 1)
    with pytest.raises(AmbiguousRenameError):  # nothing recorded
        lost_move("none", data, None, len(data))
    assert store.stats.counter(st.RENAME_RECOVERED) == 1


def test_throttled_move_is_retried(gcs_move: GcsMoveTarget) -> None:
    store = gcs_move.managed()
    proxy = gcs_move.proxy
    assert proxy is not None
    src, dst = gcs_move.url("in", "f"), gcs_move.url("out", "f")
    store.write_bytes(src, b"x")
    proxy.faults.fail("move", times=2, status=503)
    store.rename_file(src, dst)
    assert store.read_bytes(dst) == b"x" and not store.exists(src)
    assert _client_renames(gcs_move) == ["move"] * 3
    assert store.stats.counter(st.OP_RENAME + ".failures") == 2
    assert store.stats.counter(st.STORE_IO_RETRY) >= 1


def test_batch_with_throttling_and_lost_answers(gcs_move: GcsMoveTarget) -> None:
    backend = gcs_move.backend()
    store = gcs_move.managed(backend)
    proxy = gcs_move.proxy
    assert proxy is not None
    entries = []
    for i in range(40):
        src = gcs_move.url("tasks", f"t{i % 4}", f"f {i}")
        store.write_bytes(src, f"content {i}".encode())
        status = store.stat(src)
        entries.append((src, gcs_move.url("dest", f"p{i % 3}", f"f {i}"), status.size,
                        store.identity(status)))
    proxy.faults.fail("move", times=8, status=503)
    proxy.faults.lose("move", times=3)
    store.rename_batch(entries)
    assert proxy.faults.pending() == 0
    for i, (src, dst, _, _) in enumerate(entries):
        assert not store.exists(src)
        assert store.read_bytes(dst) == f"content {i}".encode()
    assert store.stats.counter(st.RENAME_RECOVERED) == 3
    assert store.stats.counter(st.STORE_IO_THROTTLED) >= 8
    assert "rewrite" not in proxy.ops()


def test_refused_move_falls_back_to_rewrite(gcs_move: GcsMoveTarget) -> None:
    """Through the proxy with the move switched off, the emulator's 400 is what the backend
    meets: it remembers that and renames by rewrite + delete."""
    assert gcs_move.proxy is not None
    gcs_move.proxy.move_supported = False
    backend = gcs_move.backend()
    store = gcs_move.managed(backend)
    for i in range(3):
        store.write_bytes(gcs_move.url("in", f"f{i}"), b"x")
        store.rename_file(gcs_move.url("in", f"f{i}"), gcs_move.url("out", f"f{i}"))
    assert backend._move_supported is False
    assert _client_renames(gcs_move) == ["move", "rewrite", "rewrite", "rewrite"]


# -- the proxy answers the move's preconditions as the API documents them ---------------------


def _move(target: GcsMoveTarget, src: str, dst: str,
          **params: str) -> tuple[int, dict[str, object]]:
    assert target.proxy is not None
    url = (f"{target.proxy.endpoint}/storage/v1/b/{quote(target.bucket, safe='')}/o/"
           f"{quote(src, safe='')}/moveTo/o/{quote(dst, safe='')}")
    if params:
        url += "?" + urlencode(params)
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_proxy_move_preconditions(gcs_move: GcsMoveTarget) -> None:
    store = gcs_move.managed()
    store.write_bytes(gcs_move.url("a"), b"a")
    store.write_bytes(gcs_move.url("b"), b"b")
    gen_a, gen_b = _generation(gcs_move, "a"), _generation(gcs_move, "b")

    assert _move(gcs_move, "a", "c", ifSourceGenerationMatch="1")[0] == 412  # stale source
    assert _move(gcs_move, "a", "b", ifGenerationMatch="0")[0] == 412  # destination exists
    assert _move(gcs_move, "a", "b", ifGenerationMatch="1")[0] == 412  # not that generation
    assert _move(gcs_move, "a", "c", ifGenerationNotMatch="5")[0] == 412  # no destination
    assert _move(gcs_move, "a", "c", ifGenerationMatch="0",
                 ifGenerationNotMatch="5")[0] == 400  # mutually exclusive
    assert _move(gcs_move, "a", "a")[0] == 400
    assert _move(gcs_move, "nope", "c")[0] == 404
    assert _generation(gcs_move, "a") == gen_a and gcs_move.object("c") is None

    status, moved = _move(gcs_move, "a", "b", ifGenerationMatch=gen_b,
                          ifSourceGenerationMatch=gen_a)
    assert status == 200
    assert moved["name"] == "b" and moved["generation"] not in (gen_a, gen_b)
    assert gcs_move.object("a") is None
    assert store.read_bytes(gcs_move.url("b")) == b"a"
