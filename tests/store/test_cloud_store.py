"""The cloud backends against their emulators, through the managed store the engine uses.

Each test runs once on Azurite (Azure Blob without a namespace: renames are copy + delete) and
once on fake-gcs-server (rewrite + delete; the move API is refused there), in a fresh bucket.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from committer import statistics as st
from committer.errors import AmbiguousRenameError, PathExistsError, PathNotFoundError, StoreError
from committer.store.azure import AzureStore
from committer.store.faults import HttpFaults
from committer.store.gcs import GcsStore
from tests.emulator_fixtures import CloudTarget

pytestmark = pytest.mark.emulator

ODD_NAMES = ["part 0000 with spaces.txt", "naïve-éàü.txt", "漢字/データ.bin", "a=b%3Ac/x#y.txt",
             "p=a b/q=ü/f.txt"]


def test_backend_kind_and_etag_semantics(cloud: CloudTarget) -> None:
    store = cloud.backend()
    assert store.native_batches
    # Neither emulated store keeps the etag on rename (Azurite's copy makes a new one; GCS's
    # rewrite makes a new generation), so identity must be a content checksum on both.
    assert not store.rename_keeps_etag
    store.write_bytes(cloud.url("f"), b"payload")
    status = store.stat(cloud.url("f"))
    assert status.checksum is not None and status.checksum.startswith("md5:")
    assert store.identity(status) == status.checksum


def test_rename_moves_and_never_replaces(cloud: CloudTarget) -> None:
    store = cloud.managed()
    src, dst = cloud.url("in", "a.txt"), cloud.url("out", "a.txt")
    store.write_bytes(src, b"first")
    store.rename_file(src, dst)
    assert not store.exists(src)
    assert store.read_bytes(dst) == b"first"

    store.write_bytes(src, b"second")
    with pytest.raises(PathExistsError):
        store.rename_file(src, dst)
    assert store.read_bytes(dst) == b"first"
    assert store.read_bytes(src) == b"second"

    store.replace_file(src, dst)  # the explicit last-writer-wins variant does replace
    assert store.read_bytes(dst) == b"second"
    assert not store.exists(src)


def test_rename_of_missing_source_is_not_found(cloud: CloudTarget) -> None:
    store = cloud.managed()
    with pytest.raises(PathNotFoundError):
        store.rename_file(cloud.url("nope"), cloud.url("dest"))
    assert not store.exists(cloud.url("dest"))


def test_exclusive_create_is_decided_by_the_store(cloud: CloudTarget) -> None:
    store = cloud.managed()
    path = cloud.url("manifests", "task_0-manifest.json")
    store.write_bytes(path, b"one", exclusive=True)
    with pytest.raises(PathExistsError):
        store.write_bytes(path, b"two", exclusive=True)
    assert store.read_bytes(path) == b"one"

    # Many writers racing for one name: the store lets exactly one win.
    racer = cloud.url("race")
    barrier = threading.Barrier(8)

    def attempt(i: int) -> bool:
        barrier.wait()
        try:
            store.write_bytes(racer, f"writer {i}".encode(), exclusive=True)
        except PathExistsError:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(attempt, range(8)))
    assert wins.count(True) == 1
    assert store.read_bytes(racer) == f"writer {wins.index(True)}".encode()


def test_directories_listing_and_tree_delete(cloud: CloudTarget) -> None:
    store = cloud.managed()
    base = cloud.url("job")
    store.mkdirs(cloud.url("job", "empty"))
    for name in ODD_NAMES:
        store.write_bytes(f"{base}/{name}", name.encode())
    listed = {s.path: s for s in store.list_dir(base)}
    assert listed[cloud.url("job", "empty")].is_dir
    assert listed[cloud.url("job", "漢字")].is_dir
    assert not listed[cloud.url("job", "naïve-éàü.txt")].is_dir
    walked = sorted(s.path for s in store.walk_files(base))
    assert walked == sorted(f"{base}/{n}" for n in ODD_NAMES)
    for name in ODD_NAMES:
        assert store.read_bytes(f"{base}/{name}") == name.encode()
    with pytest.raises(PathExistsError):
        store.mkdirs(f"{base}/{ODD_NAMES[0]}")  # a file stands there
    assert store.delete_tree(base)
    assert not store.exists(base)
    assert not store.delete_tree(base)
    with pytest.raises(PathNotFoundError):
        store.list_dir(base)


def test_a_directory_s_children_by_name_and_size_agree_with_its_listing(
        cloud: CloudTarget) -> None:
    """What the checks of a directory moved whole read (names and sizes only; on GCS a
    partial listing): the same children as ``list_dir``, directories as ``None``; a missing
    directory is not found, a file is not a directory."""
    store = cloud.managed()
    base = cloud.url("kids")
    store.mkdirs(cloud.url("kids", "empty"))
    for name in ODD_NAMES:
        store.write_bytes(f"{base}/{name}", name.encode() * 3)
    listed = {s.path.rpartition("/")[2]: None if s.is_dir else s.size
              for s in store.list_dir(base)}
    sizes = store.backend.child_sizes(base)
    assert sizes == listed
    assert sizes["naïve-éàü.txt"] == len("naïve-éàü.txt".encode()) * 3
    assert sizes["empty"] is None and sizes["漢字"] is None
    assert sorted(store.list_names(base)) == sorted(listed)
    assert store.count_children(base) == len(listed)
    files = {n: v for n, v in sizes.items() if v is not None}
    assert store.directory_holds(base, files) is None  # its directories are there too
    assert store.directory_holds(cloud.url("kids", "漢字"), {"データ.bin": 3 * len(
        "漢字/データ.bin".encode())}) == 1
    assert store.directory_holds(cloud.url("kids", "漢字"), {"データ.bin": 1}) is None
    with pytest.raises(PathNotFoundError):
        store.count_children(cloud.url("kids", "absent"))
    with pytest.raises(StoreError):
        store.list_names(f"{base}/{ODD_NAMES[0]}")


def test_remove_dir_if_empty_deletes_only_an_empty_directory(cloud: CloudTarget) -> None:
    """An empty directory goes (its marker); one with anything below it stays whole; a file
    of that name is refused and kept; nothing there is already gone."""
    store = cloud.managed()
    empty, full, file = cloud.url("rm", "empty"), cloud.url("rm", "full"), cloud.url("rm", "f")
    store.mkdirs(empty)
    assert store.exists(empty)
    assert store.remove_dir_if_empty(empty) is True
    assert not store.exists(empty)
    store.mkdirs(full)
    store.write_bytes(f"{full}/child/data", b"kept")
    assert store.remove_dir_if_empty(full) is False
    assert store.read_bytes(f"{full}/child/data") == b"kept"
    store.write_bytes(file, b"a file")
    with pytest.raises(StoreError):
        store.remove_dir_if_empty(file)
    assert store.read_bytes(file) == b"a file"
    assert store.remove_dir_if_empty(cloud.url("rm", "absent")) is True


def test_read_limit(cloud: CloudTarget) -> None:
    store = cloud.managed()
    store.write_bytes(cloud.url("big"), b"x" * 1000)
    assert store.read_bytes(cloud.url("big"), limit=1000) == b"x" * 1000
    with pytest.raises(StoreError, match="larger than the limit"):
        store.read_bytes(cloud.url("big"), limit=999)


def test_rename_batch_with_odd_names(cloud: CloudTarget) -> None:
    store = cloud.managed()
    entries = []
    for i in range(60):
        name = ODD_NAMES[i % len(ODD_NAMES)]
        src = cloud.url("tasks", f"t{i}", name)
        data = f"{i}:{name}".encode()
        store.write_bytes(src, data)
        entries.append((src, cloud.url("dest", f"t{i}", name), len(data),
                        store.identity(store.stat(src))))
    store.rename_batch(entries)
    for i, (src, dst, size, _) in enumerate(entries):
        assert not store.exists(src)
        assert store.read_bytes(dst) == f"{i}:{ODD_NAMES[i % len(ODD_NAMES)]}".encode()
        assert store.stat(dst).size == size
    assert store.stats.counter(st.OP_RENAME) == 60


class _Once(HttpFaults):
    """Fail the first request of one operation (before it is sent, or after it landed)."""

    def __init__(self, op: str, *, after: bool) -> None:
        super().__init__(rate=0.0 if after else 1.0, after_rate=1.0 if after else 0.0,
                         operations=frozenset({op}))

    def before(self, op: str) -> bool:
        hit = super().before(op)
        if hit:
            self.rate = 0.0
        return hit

    def after(self, op: str) -> bool:
        hit = super().after(op)
        if hit:
            self.after_rate = 0.0
        return hit


def test_half_done_rename_is_completed_by_the_retry(cloud: CloudTarget) -> None:
    """The copy landed but the rename did not finish (source still present): the retry finds
    its own finished copy at the destination, deletes the source, and succeeds."""
    backend = cloud.backend()
    assert isinstance(backend, AzureStore | GcsStore)
    store = cloud.managed(backend)
    src, dst = cloud.url("s", "f.bin"), cloud.url("d", "f.bin")
    store.write_bytes(src, b"z" * 300)
    # GCS: the rewrite's answer is lost; Azure: the delete after the copy is throttled.
    backend.faults = (_Once("copy", after=True) if isinstance(backend, GcsStore)
                      else _Once("delete_file", after=False))
    try:
        store.rename_file(src, dst, size=300, etag=None)
    finally:
        backend.faults = None
    assert not store.exists(src)
    assert store.read_bytes(dst) == b"z" * 300
    assert store.stats.counter(st.OP_RENAME + ".failures") == 1  # the first try failed

    # A destination holding *other* bytes is a conflict, never "completed".
    store.write_bytes(src, b"y" * 300)
    with pytest.raises(PathExistsError):
        store.rename_file(src, dst)
    assert store.read_bytes(dst) == b"z" * 300


def test_ambiguous_rename_recovered_only_on_matching_identity(cloud: CloudTarget) -> None:
    """HADOOP-18012 on copy-based stores: the whole rename happened but its answer was lost;
    the retry finds no source. Success only if the destination's checksum and size prove it
    is the file; an etag (changed by the copy) or a different file proves nothing."""
    backend = cloud.backend()
    assert isinstance(backend, AzureStore | GcsStore)
    store = cloud.managed(backend)

    def lost_rename(name: str, data: bytes, expected: str | None, size: int) -> None:
        src, dst = cloud.url("src", name), cloud.url("dst", name)
        store.write_bytes(src, data)
        backend.faults = HttpFaults(after_rate=1.0, operations=frozenset({"rename_file"}))
        try:
            store.rename_file(src, dst, size=size, etag=expected)
        finally:
            backend.faults = None

    data = b"exactly these bytes"
    store.write_bytes(cloud.url("probe"), data)
    probe = store.stat(cloud.url("probe"))
    identity = store.identity(probe)
    assert identity is not None and identity.startswith("md5:")

    lost_rename("good", data, identity, len(data))
    assert store.stats.counter(st.RENAME_RECOVERED) == 1
    assert store.read_bytes(cloud.url("dst", "good")) == data

    # The source's etag does not survive a copy: it cannot prove anything here.
    with pytest.raises(AmbiguousRenameError):
        lost_rename("by-etag", data, probe.etag, len(data))
    # Same size, different content: refused.
    with pytest.raises(AmbiguousRenameError):
        lost_rename("other", b"exactly those bytes", identity, len(data))
    # Right checksum, wrong size in the manifest: refused.
    with pytest.raises(AmbiguousRenameError):
        lost_rename("size", data, identity, len(data) + 1)
    # Nothing recorded: never a silent success.
    with pytest.raises(AmbiguousRenameError):
        lost_rename("none", data, None, len(data))
    assert store.stats.counter(st.RENAME_RECOVERED) == 1


def test_throttling_20_percent_nothing_lost(cloud: CloudTarget) -> None:
    backend = cloud.backend()
    assert isinstance(backend, AzureStore | GcsStore)
    # A rename is a compound of 3-5 requests here (check, copy, delete; on a retry also the
    # reads that prove a half-done copy), retried as a whole; at 20% per request an attempt
    # succeeds about 1 time in 3, so 30 attempts leave a chance of about 1e-5 per file.
    store = cloud.managed(backend, retry_attempts=30)
    entries = []
    for i in range(120):
        src = cloud.url("src", f"p{i % 4}", f"file {i}.txt")
        store.write_bytes(src, f"content {i}".encode())
        entries.append((src, cloud.url("dst", f"p{i % 4}", f"file {i}.txt"),
                        len(f"content {i}"), None))
    backend.faults = HttpFaults(rate=0.2, seed=7)
    try:
        store.rename_batch(entries)
        listed = sorted(s.path for s in store.walk_files(cloud.url("dst")))
        assert store.delete_tree(cloud.url("src")) in (True, False)
    finally:
        injected = backend.faults.injected
        backend.faults = None
    assert injected > 10
    assert listed == sorted(e[1] for e in entries)
    for i, (_, dst, _, _) in enumerate(entries):
        assert store.read_bytes(dst) == f"content {i}".encode()
    assert store.stats.counter(st.STORE_IO_RETRY) > 0
    assert store.stats.counter(st.STORE_IO_THROTTLED) > 0
