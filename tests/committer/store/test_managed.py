"""ManagedStore: statistics, retries of transient failures, rate limit, rename recovery."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from committer.config import CommitterConfig
from committer.errors import (
    AmbiguousRenameError,
    PathExistsError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
)
from committer.store import ManagedStore, open_store
from committer.store.base import FileStatus
from committer.store.faults import FaultInjectingStore, FaultPlan
from committer.store.local import LocalStore
from committer.store.rate_limit import RateLimiter
from tests.committer.helpers import fast_config
from tests.committer.store.virtual_clock import VirtualClock


def _store(plan: FaultPlan, **config: int) -> tuple[ManagedStore, FaultInjectingStore]:
    faults = FaultInjectingStore(LocalStore(), plan)
    return ManagedStore(faults, fast_config(**config)), faults


def test_open_store_picks_local_disk_for_paths_and_file_uris(tmp_path: Path) -> None:
    for location in (str(tmp_path), f"file://{tmp_path}", f"file:{tmp_path}"):
        assert isinstance(open_store(location).backend, LocalStore)


def test_operations_are_counted_under_hadoop_names(tmp_path: Path) -> None:
    store = ManagedStore(LocalStore(), fast_config())
    store.mkdirs(str(tmp_path / "d"))
    store.write_bytes(str(tmp_path / "d" / "a"), b"x")
    store.rename_file(str(tmp_path / "d" / "a"), str(tmp_path / "d" / "b"))
    store.list_dir(str(tmp_path / "d"))
    store.stat(str(tmp_path / "d" / "b"))
    store.delete_file(str(tmp_path / "d" / "b"))
    with pytest.raises(PathNotFoundError):
        store.stat(str(tmp_path / "d" / "b"))
    snap = store.stats.snapshot()
    for name in ("op_mkdirs", "op_rename", "op_list_status", "op_delete"):
        assert snap.counters[name] == 1, name
        assert f"{name}.mean" in snap.meanstatistics
    assert snap.counters["op_get_file_status"] == 1
    assert snap.counters["op_get_file_status.failures"] == 1


def test_transient_failures_are_retried(tmp_path: Path) -> None:
    store, faults = _store(FaultPlan(rate=0.5, operations=frozenset({"stat"}), seed=4))
    (tmp_path / "f").write_bytes(b"abc")
    for _ in range(20):
        assert store.stat(str(tmp_path / "f")).size == 3
    assert faults.injected > 0
    assert store.stats.counter("store_io_retry") >= 1
    assert store.stats.counter("store_io_throttled") >= 1


def test_retries_give_up_after_the_configured_attempts(tmp_path: Path) -> None:
    store, faults = _store(FaultPlan(rate=1.0, operations=frozenset({"stat"})), retry_attempts=3)
    with pytest.raises(TransientStoreError):
        store.stat(str(tmp_path))
    # the first call, then ``retry_attempts`` retries
    assert faults.injected == 4


def test_non_transient_failures_are_not_retried(tmp_path: Path) -> None:
    store, _ = _store(FaultPlan())
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(PathExistsError):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"))
    assert store.stats.counter("store_io_retry") == 0


def test_rename_after_timeout_is_recovered(tmp_path: Path) -> None:
    store, _ = _store(FaultPlan(after_rate=1.0))
    (tmp_path / "a").write_bytes(b"abc")
    etag = LocalStore().stat(str(tmp_path / "a")).etag
    store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"), size=3, etag=etag)
    assert (tmp_path / "b").read_bytes() == b"abc"
    assert store.stats.counter("commit_file_rename_recovered") == 1


def test_rename_after_timeout_with_wrong_etag_is_ambiguous(tmp_path: Path) -> None:
    store, _ = _store(FaultPlan(after_rate=1.0))
    (tmp_path / "a").write_bytes(b"abc")
    with pytest.raises(AmbiguousRenameError, match="cannot be proven"):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"), size=3, etag="not-it")
    assert (tmp_path / "b").read_bytes() == b"abc"  # nothing lost
    assert store.stats.counter("commit_file_rename_recovered") == 0


def test_rename_after_timeout_with_wrong_size_is_ambiguous(tmp_path: Path) -> None:
    store, _ = _store(FaultPlan(after_rate=1.0))
    (tmp_path / "a").write_bytes(b"abc")
    etag = LocalStore().stat(str(tmp_path / "a")).etag
    with pytest.raises(AmbiguousRenameError):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"), size=4, etag=etag)


def test_rename_of_a_missing_source_is_not_found(tmp_path: Path) -> None:
    store, _ = _store(FaultPlan())
    with pytest.raises(PathNotFoundError):
        store.rename_file(str(tmp_path / "none"), str(tmp_path / "b"), size=1, etag="x")


def test_parent_missing_once_is_cured(tmp_path: Path) -> None:
    store, faults = _store(FaultPlan(parent_missing_once={"target"}))
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "target").mkdir()
    store.rename_file(str(tmp_path / "a"), str(tmp_path / "target" / "a"), size=1)
    assert (tmp_path / "target" / "a").exists()
    assert faults.plan.parent_missing_once == set()


def test_parent_really_missing_is_reported(tmp_path: Path) -> None:
    """The HADOOP-18242 retry recreates the parent: a genuinely absent one is created too.
    Only a second 'parent missing' is fatal."""
    store, _ = _store(FaultPlan())
    (tmp_path / "a").write_bytes(b"a")
    store.rename_file(str(tmp_path / "a"), str(tmp_path / "new" / "a"), size=1)
    assert (tmp_path / "new" / "a").exists()


def test_rename_batch_renames_all(tmp_path: Path) -> None:
    store, _ = _store(FaultPlan(rate=0.2, after_rate=0.2, seed=9))
    entries = []
    for i in range(30):
        (tmp_path / f"s{i}").write_bytes(b"x" * i)
        etag = LocalStore().stat(str(tmp_path / f"s{i}")).etag
        entries.append((str(tmp_path / f"s{i}"), str(tmp_path / f"d{i}"), i, etag))
    store.rename_batch(entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"d{i}" for i in range(30))


def test_save_atomic_replaces(tmp_path: Path) -> None:
    store = ManagedStore(LocalStore(), fast_config())
    target = str(tmp_path / "_SUCCESS")
    store.save_atomic(target, b"one", str(tmp_path / "t1"))
    store.save_atomic(target, b"two", str(tmp_path / "t2"))
    assert (tmp_path / "_SUCCESS").read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_SUCCESS"]


class _WholeWrites(LocalStore):
    """A store whose writes are seen whole or not at all (as an object upload is); records
    its calls."""

    writes_whole = True

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        self.calls.append(f"write {Path(path).name}")
        super().write_bytes(path, data, exclusive=exclusive)

    def replace_file(self, src: str, dst: str) -> None:
        self.calls.append(f"replace {Path(src).name}")
        super().replace_file(src, dst)


class _ResetsFirstUpload(_WholeWrites):
    """An object store whose first upload loses its connection (as Azurite reset one)."""

    def __init__(self) -> None:
        super().__init__()
        self.uploads = 0

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        self.uploads += 1
        if self.uploads == 1:
            raise TransientStoreError(f"write_bytes {path}: no answer (connection reset)", path)
        super().write_bytes(path, data, exclusive=exclusive)


def test_a_stream_uploaded_at_close_is_retried_as_a_write(tmp_path: Path) -> None:
    backend = _ResetsFirstUpload()
    store = ManagedStore(backend, fast_config())
    with store.open_write(str(tmp_path / "part-0")) as out:
        out.write(b"task output")
    assert (tmp_path / "part-0").read_bytes() == b"task output"
    assert backend.uploads == 2


def test_save_atomic_writes_directly_where_writes_are_whole(tmp_path: Path) -> None:
    # an object store's upload is already all or nothing: no temporary object, no copy and
    # delete to move it over the target
    backend = _WholeWrites()
    store = ManagedStore(backend, fast_config())
    target = str(tmp_path / "_SUCCESS")
    store.save_atomic(target, b"one", str(tmp_path / "t1"))
    store.save_atomic(target, b"two", str(tmp_path / "t2"))
    assert (tmp_path / "_SUCCESS").read_bytes() == b"two"
    assert backend.calls == ["write _SUCCESS", "write _SUCCESS"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_SUCCESS"]


# The rate limiter's tests run on virtual time (``virtual_clock.py``): the waits are the
# limiter's, exact, not the machine's (a pause of the test process refills the bucket).


def test_rate_limit_paces_operations(tmp_path: Path) -> None:
    clock = VirtualClock()
    store = ManagedStore(LocalStore(), fast_config(io_rate_limit=50),
                         limiter=RateLimiter(50, clock=clock.monotonic, sleep=clock.sleep))
    (tmp_path / "f").write_bytes(b"")
    for _ in range(75):  # 50 from the burst, then 25 at 50/s
        store.stat(str(tmp_path / "f"))
    assert clock.now == pytest.approx(0.5)
    assert store.stats.counter("store_io_rate_limited") == 25


def test_rate_limiter_token_bucket() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(100, clock=clock.monotonic, sleep=clock.sleep)
    waited = sum(limiter.acquire() for _ in range(100))  # the burst
    assert waited == 0.0 and clock.now == 0.0
    waited = sum(limiter.acquire() for _ in range(30))
    # 30 permits beyond the burst at 100/s: 0.3 s, each waiting its 10 ms
    assert waited == pytest.approx(0.3) and clock.now == pytest.approx(0.3)
    with pytest.raises(ValueError):
        RateLimiter(0)


def test_rate_limiter_is_shared_by_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    limiter = RateLimiter(200)
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: limiter.acquire(), range(300)))
    assert time.monotonic() - t0 >= 0.45  # 200 burst + 100 at 200/s


def test_reads_wait_under_a_rate_limit_even_on_local_disk(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LocalStore, "reads_wait", lambda self, path: False)
    assert not ManagedStore(LocalStore(), fast_config()).reads_wait(str(tmp_path))
    assert ManagedStore(LocalStore(), fast_config(io_rate_limit=50)).reads_wait(str(tmp_path))


class _ThrottlingBatches(LocalStore):
    """A concurrent-batch store (as the cloud backends are) whose service refuses the first
    entries of each batch, ``refusals`` times over, asking for ``retry_after`` seconds."""

    native_batches = True

    def __init__(self, refusals: int, retry_after: float | None, per_batch: int = 3) -> None:
        super().__init__()
        self.refusals = refusals
        self.retry_after = retry_after
        self.per_batch = per_batch
        self.batches: list[list[str]] = []
        self.times: list[float] = []

    def rename_batch(self, entries, start=0):  # type: ignore[no-untyped-def]
        self.batches.append([e[0] for e in entries[start:]])
        self.times.append(time.monotonic())
        failures = []
        for i in range(start, len(entries)):
            if self.refusals > 0 and i - start < self.per_batch:
                failures.append((i, TransientStoreError(
                    f"throttled: {entries[i][0]}", entries[i][0], throttled=True,
                    retry_after=self.retry_after)))
                continue
            self.rename_file(entries[i][0], entries[i][1])
        if failures:
            self.refusals -= 1
        return len(entries), failures


def _batch_entries(tmp_path: Path, n: int) -> list[tuple[str, str, int | None, str | None]]:
    (tmp_path / "out").mkdir()
    entries: list[tuple[str, str, int | None, str | None]] = []
    for i in range(n):
        (tmp_path / f"s{i}").write_bytes(b"x")
        entries.append((str(tmp_path / f"s{i}"), str(tmp_path / "out" / f"s{i}"), 1, None))
    return entries


def test_refused_entries_of_a_batch_are_sent_again_together_after_the_asked_wait(
        tmp_path: Path) -> None:
    backend = _ThrottlingBatches(refusals=2, retry_after=0.2)
    store = ManagedStore(backend, fast_config(retry_max_delay_ms=1000))
    entries = _batch_entries(tmp_path, 10)
    store.rename_batch(entries)
    assert all((tmp_path / "out" / f"s{i}").exists() for i in range(10))
    # the whole batch, then the three refused ones twice more as a batch of their own: never
    # one call per refused file, never the existence checks of the ambiguous path
    assert [len(b) for b in backend.batches] == [10, 3, 3]
    assert backend.batches[1] == [e[0] for e in entries[:3]]
    gaps = [b - a for a, b in zip(backend.times, backend.times[1:], strict=False)]
    assert min(gaps) >= 0.2  # Retry-After honoured
    assert store.stats.counter("store_io_retry") == 2
    assert store.stats.counter("store_io_throttled") == 6
    assert store.stats.counter("op_rename") == 10


def test_asked_wait_is_bounded_and_exhausted_retries_raise(tmp_path: Path) -> None:
    backend = _ThrottlingBatches(refusals=100, retry_after=3600.0, per_batch=1)
    store = ManagedStore(backend, fast_config(retry_throttled_attempts=3,
                                              retry_max_delay_ms=50))
    with pytest.raises(TransientStoreError) as refused:
        store.rename_batch(_batch_entries(tmp_path, 4))
    assert refused.value.throttled
    # an hour asked, the configured bound (50 ms) waited, three times (the waits as slept)
    backoff = store.stats.snapshot().meanstatistics["op_rename_throttle_backoff.mean"]
    assert backoff.samples == 3 and backoff.sum <= 3 * 50
    assert len(backend.batches) == 4  # the first try and three more
    assert (tmp_path / "s0").exists() and not (tmp_path / "out" / "s0").exists()


def test_refusals_get_more_retries_than_other_transient_failures(tmp_path: Path) -> None:
    # a store throttled at random (a rate signal: nothing done) must not fail the commit as
    # soon as a few refusals come in a row; other transient failures keep the small budget
    backend = _ThrottlingBatches(refusals=5, retry_after=None, per_batch=1)
    store = ManagedStore(backend, fast_config(retry_attempts=2, retry_throttled_attempts=8,
                                              retry_max_delay_ms=5))
    store.rename_batch(_batch_entries(tmp_path, 4))
    assert len(backend.batches) == 6  # refused five times, then done
    assert (tmp_path / "out" / "s0").exists()
    store, faults = _store(FaultPlan(rate=1.0, operations=frozenset({"stat"})),
                           retry_attempts=2, retry_throttled_attempts=8)
    with pytest.raises(TransientStoreError):
        store.stat(str(tmp_path))
    assert faults.injected == 3  # not throttled: the first call and two retries


class _LosingBatches(LocalStore):
    """A concurrent-batch store that renames every entry but loses the answers of the first
    ``lost`` entries of its first batch; a source found missing is reported as such."""

    native_batches = True

    def __init__(self, lost: int) -> None:
        super().__init__()
        self.lost = lost
        self.batches: list[list[str]] = []

    def rename_batch(self, entries, start=0):  # type: ignore[no-untyped-def]
        self.batches.append([e[0] for e in entries[start:]])
        failures: list[tuple[int, StoreError]] = []
        for i in range(start, len(entries)):
            try:
                self.rename_file(entries[i][0], entries[i][1])
            except PathNotFoundError as e:
                failures.append((i, e))
                continue
            if i - start < self.lost:
                failures.append((i, TransientStoreError(f"answer lost: {entries[i][0]}",
                                                        entries[i][0])))
        self.lost = 0
        return len(entries), failures


def test_lost_answers_of_a_batch_are_sent_again_as_a_batch(tmp_path: Path) -> None:
    # a hundred files of a lost batch answer are not a hundred sequential slow paths: they
    # go again as a batch, which reports the ones already done as missing sources, proven
    # at their destinations
    backend = _LosingBatches(lost=3)
    store = ManagedStore(backend, fast_config())
    entries = [(src, dst, size, backend.stat(src).etag)  # the identity a manifest records
               for src, dst, size, _ in _batch_entries(tmp_path, 10)]
    store.rename_batch(entries)
    assert [len(b) for b in backend.batches] == [10, 3]
    assert all((tmp_path / "out" / f"s{i}").exists() for i in range(10))
    assert not any((tmp_path / f"s{i}").exists() for i in range(10))
    assert store.stats.counter("commit_file_rename_recovered") == 3


class _StatsAtOnce(_LosingBatches):
    """A concurrent-batch store that says how it was asked for statuses: one by one, or many
    at once."""

    def __init__(self) -> None:
        super().__init__(lost=0)
        self.asked_at_once: list[int] = []
        self.asked_alone = 0

    def stat(self, path: str) -> FileStatus:
        self.asked_alone += 1
        return super().stat(path)

    def stat_many(self, paths, directories=False):  # type: ignore[no-untyped-def]
        self.asked_at_once.append(len(paths))
        alone = self.asked_alone
        try:
            return super().stat_many(paths, directories)
        finally:
            self.asked_alone = alone


def test_a_batch_of_renames_done_before_is_proven_at_once(tmp_path: Path) -> None:
    # a resumed commit's batch finds the sources its first attempt renamed gone: every source
    # and destination is looked up at once (one round trip on a cloud store), not one rename
    # after another through the slow path
    backend = _StatsAtOnce()
    store = ManagedStore(backend, fast_config())
    entries = [(src, dst, size, backend.stat(src).etag)
               for src, dst, size, _ in _batch_entries(tmp_path, 10)]
    for src, dst, _, _ in entries[:6]:
        Path(src).rename(dst)
    backend.asked_alone = 0
    store.rename_batch(entries)
    assert all((tmp_path / "out" / f"s{i}").exists() for i in range(10))
    assert store.stats.counter("commit_file_rename_recovered") == 6
    assert backend.asked_at_once == [12] and backend.asked_alone == 0


def test_a_batch_entry_done_before_but_not_provably_is_ambiguous(tmp_path: Path) -> None:
    backend = _StatsAtOnce()
    store = ManagedStore(backend, fast_config())
    entries = [(src, dst, size, backend.stat(src).etag)
               for src, dst, size, _ in _batch_entries(tmp_path, 4)]
    Path(entries[0][0]).unlink()
    Path(entries[0][1]).write_bytes(b"another file")
    Path(entries[1][0]).unlink()  # and this one is nowhere
    with pytest.raises(AmbiguousRenameError, match="cannot be proven"):
        store.rename_batch(entries)
    assert Path(entries[0][1]).read_bytes() == b"another file"


class _RefusesFirstStat(LocalStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def stat(self, path: str) -> FileStatus:
        self.calls += 1
        if self.calls == 1:
            raise TransientStoreError(f"throttled: {path}", path, throttled=True)
        return super().stat(path)


def test_many_statuses_at_once_retry_a_transient_failure_alone(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    backend = _RefusesFirstStat()
    store = ManagedStore(backend, fast_config())
    found = store.stat_many([str(tmp_path / "a"), str(tmp_path / "b")])
    assert found[0] is not None and found[0].size == 1 and found[1] is None
    assert backend.calls == 3  # a, b, then a again
    assert store.stats.counter("store_io_throttled") == 1


def test_retry_after_is_honoured_by_single_operations(tmp_path: Path) -> None:
    class Busy(LocalStore):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[float] = []

        def stat(self, path: str) -> FileStatus:
            self.calls.append(time.monotonic())
            if len(self.calls) == 1:
                raise TransientStoreError("busy", path, throttled=True, retry_after=0.3)
            return super().stat(path)

    backend = Busy()
    (tmp_path / "f").write_bytes(b"abc")
    store = ManagedStore(backend, fast_config(retry_max_delay_ms=1000))
    assert store.stat(str(tmp_path / "f")).size == 3
    assert backend.calls[1] - backend.calls[0] >= 0.3


@pytest.mark.parametrize("local", [True, False], ids=["stat per source", "one listing"])
def test_identify_sources_is_counted_as_what_it_costs(tmp_path: Path, local: bool) -> None:
    """On local disk one stat per source (``op_get_file_status`` each); on a store without
    that (here local disk behind the fault layer, which offers only the Store interface) one
    walk of the root: ``op_list_status`` once, whatever the number of sources."""
    from committer import statistics as st

    root = tmp_path / "attempt"
    (root / "p=1").mkdir(parents=True)
    for name, data in {"a": b"aa", "b": b"b", "c": b""}.items():
        (root / "p=1" / name).write_bytes(data)
    entries: list[tuple[str, str, int, str | None]] = [
        (str(root / "p=1" / n), f"/dest/{n}", z, None) for n, z in (("a", 2), ("b", 1), ("c", 0))]
    entries.append((str(root / "p=1" / "gone"), "/dest/gone", 1, None))
    entries.append((str(root / "p=1" / "a"), "/dest/again", 3, None))  # another size
    entries.append((str(root / "p=1" / "b"), "/dest/known", 1, "kept"))
    store = ManagedStore(LocalStore(), fast_config()) if local else _store(FaultPlan())[0]
    assert store.identifies_by_stat is local
    out, mismatches = store.identify_sources(str(root), entries)
    assert sorted(mismatches) == [(3, None), (4, 2)]
    assert [e[3] is not None for e in out] == [True, True, True, False, False, True]
    assert out[:3] == [(*e[:3], LocalStore().stat(e[0]).etag) for e in entries[:3]]
    counters = store.stats.snapshot().counters
    if local:
        assert counters[st.OP_GET_FILE_STATUS] == 5 and st.OP_LIST_STATUS not in counters
    else:
        assert counters[st.OP_LIST_STATUS] == 1 and st.OP_GET_FILE_STATUS not in counters
    out, mismatches = store.identify_sources(str(tmp_path / "absent"), entries[:2])
    assert sorted(mismatches) == [(0, None), (1, None)]


class _AccountStore(LocalStore):
    """Local disk standing in for a store whose service limits requests per account."""

    account_rate_limited = True


def test_the_static_cap_defaults_to_20000_a_second_on_cloud_stores_only() -> None:
    """The smallest standard Azure account's rate (Microsoft's scalability targets: 20,000
    requests a second, 40,000 in the large regions); the adaptive limit paces below it."""
    from committer.config import DEFAULT_CLOUD_RATE_LIMIT

    assert DEFAULT_CLOUD_RATE_LIMIT == 20_000
    cloud = ManagedStore(_AccountStore(), CommitterConfig())
    assert cloud.rate_limit == 20_000 and cloud.limiter is not None
    assert cloud.limiter.rate == 20_000
    # set: that cap, or none at all with 0
    assert ManagedStore(_AccountStore(), CommitterConfig(io_rate_limit=50)).rate_limit == 50
    assert ManagedStore(_AccountStore(), CommitterConfig(io_rate_limit=0)).limiter is None
    # local disk: no cap unless one is set
    assert ManagedStore(LocalStore(), CommitterConfig()).limiter is None
    assert ManagedStore(LocalStore(), CommitterConfig(io_rate_limit=50)).rate_limit == 50
    # the worker processes of a fanned-out commit never cap again (the commit paced for them)
    assert cloud.worker_config().io_rate_limit == 0


def test_the_cloud_backends_declare_their_account_limit() -> None:
    from committer.store.azure.store import AzureStore
    from committer.store.gcs.store import GcsStore

    assert AzureStore.account_rate_limited and GcsStore.account_rate_limited
    assert not LocalStore.account_rate_limited


def test_held_seconds_is_the_wall_time_someone_waited_not_the_waits_added_up() -> None:
    import threading

    clock = VirtualClock(parties=8)  # (time moves once all eight threads wait)
    limiter = RateLimiter(200, clock=clock.monotonic, sleep=clock.sleep)
    limiter.acquire(200)  # the burst
    assert limiter.held_seconds() == 0.0
    waits: list[float] = []

    def wait() -> None:
        try:
            waits.append(limiter.acquire(10))
        finally:
            clock.done()

    threads = [threading.Thread(target=wait) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)  # (a bound for a hang: no real time passes in the limiter)
    assert len(waits) == 8
    # 80 permits at 200/s: held 0.4 s; eight threads waiting side by side, a 20th of a second
    # more each, waited 0.05 + 0.1 + ... + 0.4 = 1.8 s between them
    assert limiter.held_seconds() == pytest.approx(0.4) == clock.now
    assert sorted(waits) == pytest.approx([0.05 * k for k in range(1, 9)])


def test_waits_on_the_cap_and_throttling_backoff_are_recorded_for_renames(
        tmp_path: Path) -> None:
    backend = _ThrottlingBatches(refusals=1, retry_after=0.1)
    clock = VirtualClock()  # the cap's (the backoff sleeps for real)
    store = ManagedStore(backend, fast_config(io_rate_limit=20, retry_max_delay_ms=1000),
                         limiter=RateLimiter(20, clock=clock.monotonic, sleep=clock.sleep))
    store.rename_batch(_batch_entries(tmp_path, 30))  # 20 from the burst, 10 at 20/s
    snapshot = store.stats.snapshot()
    means = snapshot.meanstatistics
    for name in ("store_io_rate_limited", "op_rename_rate_limited",
                 "store_io_throttle_backoff", "op_rename_throttle_backoff"):
        assert f"{name}.mean" in means, name
    assert means["op_rename_rate_limited.mean"].sum >= 300  # 10 permits at 20/s: ~0.5 s
    assert means["op_rename_throttle_backoff.mean"].sum >= 100  # the Retry-After asked
    assert store.rate_limit_held_s() >= 0.3


def test_the_backend_is_told_once_when_the_commits_last_renames_are_handed_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large commit races only its last ``TAIL_RACED`` renames: the batch that reaches
    them tells the backend (``tail_begins``) before it is sent, and no batch again."""
    monkeypatch.setattr("committer.store.managed.renames.TAIL_RACED", 30)
    backend = LocalStore()
    told: list[int] = []  # renames done when the backend was told
    monkeypatch.setattr(backend, "tail_begins",
                        lambda: told.append(len(list((tmp_path / "out").iterdir()))))
    store = ManagedStore(backend, fast_config())
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    entries = []
    for i in range(100):
        (tmp_path / "in" / f"f{i}").write_bytes(b"x")
        entries.append((str(tmp_path / "in" / f"f{i}"), str(tmp_path / "out" / f"f{i}"),
                        1, None))
    store.expect_requests(len(entries))
    for k in range(0, 100, 20):
        store.rename_batch(entries[k:k + 20])
    assert told == [60]  # before the fourth batch: 20 renames left after it, of 30 raced
