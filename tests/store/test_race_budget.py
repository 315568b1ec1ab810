"""Races on a budget, and one-by-one renames only where they win, on the simulated account.

A small commit on flat Blob or GCS renames each file with requests of its own and races its
latency tail, while the service is not strained as a whole; once it refuses or is slowed
(``http/strain.py``), no request is raced and the files go in batches, the choice made again
as each file gets its place in the limit (GCS rewrites) or its copy lands (the sources'
deletes). Each test pins the strain (``PinnedStrain``), so what it shows does not hang on how
busy this machine is; how the strain is read from the answers is ``tests/committer/store/http/
test_strain.py``'s. Every commit ends exact, and its ``_SUCCESS`` counts its requests and
races."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from benchmarks.cloud_scale import _check
from benchmarks.cloud_scale.job import generate
from committer import JobCommitter
from committer import statistics as st
from committer.config import CommitterConfig
from committer.errors import PathNotFoundError
from committer.store import ManagedStore, open_store
from committer.store.azure.store import EARLY_DELETES
from committer.store.http.hedge import SHARE
from committer.testing.cloud_sim import CloudSim, start_cloud_sim
from tests.committer.helpers import PinnedStrain as Pinned
from tests.committer.helpers import fast_config, pin_strain

Entry = tuple[str, str, int, str | None]
_BATCH = {"blob": "blob_batch", "gcs": "gcs_batch"}
_COPY = {"blob": "copy_blob", "gcs": "rewrite"}
_DELETE = {"blob": "delete_blob", "gcs": "delete_object"}


def _top_level(sim: CloudSim, op: str) -> int:
    """Requests of ``op`` the account answered, not counting a batch's parts."""
    return int(sim.stats()["requests_by_op"].get(op, 0))


@contextmanager
def _renames(service: str, files: int, *, latency_ms: float = 0.0, concurrency: int = 64
             ) -> Iterator[tuple[CloudSim, ManagedStore, list[Entry]]]:
    """``files`` sources on a flat account (GCS without the move API, as fake-gcs-server),
    as rename entries with the identity a task records, and a store for a small commit."""
    p99 = latency_ms * 10 if latency_ms else 0.0
    with start_cloud_sim(service=service, latency_ms=latency_ms, p99_ms=p99, seed=3) as sim:
        options = {**sim.trusted_options, "committer_concurrency": concurrency}
        store = open_store(f"{sim.scheme}://any", fast_config(storage_options=options))
        try:
            root = f"{sim.scheme}://r{uuid.uuid4().hex[:8]}"
            store.mkdirs(root + "/out")
            sources = [f"{root}/in/f{i}" for i in range(files)]
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p: store.write_bytes(p, p.encode()), sources))
                identities = list(pool.map(lambda p: store.identity(store.stat(p)), sources))
            store.commit_begins()
            store.expect_requests(files)  # a small commit's
            sim.reset_stats()
            yield sim, store, [(src, f"{root}/out/{i}", len(src), ident) for i, (src, ident)
                               in enumerate(zip(sources, identities, strict=True))]
        finally:
            store.close()


def _renamed(store: ManagedStore, entries: list[Entry]) -> bool:
    """Every file at its destination, its source gone."""
    for src, dst, _, _ in entries:
        if store.read_bytes(dst) != src.encode():
            return False
        try:
            store.stat(src)
        except PathNotFoundError:
            continue
        return False
    return True


@pytest.mark.parametrize("service", ["blob", "gcs"])
def test_a_small_commit_renames_each_file_alone_while_the_service_is_not_strained(
        service: str) -> None:
    with _renames(service, 120) as (sim, store, entries):
        pin_strain(store, Pinned(False))
        store.rename_batch(entries)
        assert _top_level(sim, _BATCH[service]) == 0
        assert _top_level(sim, _COPY[service]) >= 120 and _top_level(sim, _DELETE[service]) >= 120
        assert _renamed(store, entries)


@pytest.mark.parametrize("service", ["blob", "gcs"])
def test_a_strained_service_gets_batches_and_no_race(service: str) -> None:
    """Slowed as a whole, with a latency tail that would have the requests raced: the sources'
    deletes (and GCS's rewrites) go in batches, nothing is raced, every file is renamed."""
    with _renames(service, 120, latency_ms=2.0) as (sim, store, entries):
        pin_strain(store, Pinned(True))
        hedger = store.backend.hedger  # type: ignore[attr-defined]
        store.rename_batch(entries)
        if service == "gcs":
            assert _top_level(sim, "delete_object") == 0 and _top_level(sim, "gcs_batch") >= 1
            # the first file alone learns that the move API is missing; the rest in batches
            assert _top_level(sim, "rewrite") <= 1
        else:
            assert _top_level(sim, "copy_blob") == 120  # a Blob Batch carries deletes only
            # the copied sources in groups of at least EARLY_DELETES while the other copies
            # go on, the rest at the end (a single one as a plain Delete)
            deletes = _top_level(sim, "blob_batch") + _top_level(sim, "delete_blob")
            assert _top_level(sim, "blob_batch") >= 1 and _top_level(sim, "delete_blob") <= 1
            assert 2 <= deletes <= -(-120 // EARLY_DELETES)
        assert hedger.hedged == 0
        assert _renamed(store, entries)


def test_files_that_get_their_place_once_the_service_slows_go_in_a_batch() -> None:
    """GCS rewrites of a small commit wait for a place in the limit before they are chosen:
    the service slows after a few answers, and the files still waiting then go through the
    batch endpoint, the sources of those alone deleted in batches too."""
    with _renames("gcs", 200, concurrency=8) as (sim, store, entries):
        pin_strain(store, Pinned(False, after=20))
        store.rename_batch(entries)
        singles = _top_level(sim, "rewrite")
        assert 1 <= singles <= 20 + 8  # those admitted before the 20th answer
        assert _top_level(sim, "gcs_batch") >= 2  # rewrites, then deletes
        by_op = sim.stats()["by_op"]
        assert by_op["rewrite"] == 200 and by_op["delete_object"] == 200
        assert _renamed(store, entries)


@pytest.mark.parametrize("service", ["blob", "gcs"])
def test_sources_copied_while_the_service_was_strained_go_once_it_is_not(
        service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small commit's burst slows the service for a moment: the sources whose copies land
    then wait (for a batch), and the first copy to land once it is over takes them along,
    each deleted alone, while the other copies still answer; not all left for the end."""
    with _renames(service, 160, concurrency=256) as (_, store, entries):
        pin_strain(store, Pinned(False, after=20, until=40))
        backend = store.backend
        events: list[int] = []  # 0: a copy landed; n > 0: n sources deleted alone at once
        copy_name = "_copy" if service == "blob" else "_rewrite"
        copy = getattr(backend, copy_name)
        delete_each = backend._delete_each  # type: ignore[attr-defined]

        async def copied(*args: object, **kwargs: object) -> object:
            source = await copy(*args, **kwargs)
            events.append(0)
            return source

        async def deleted(objects: list[tuple[str, str]]) -> object:
            events.append(len(objects))
            return await delete_each(objects)

        monkeypatch.setattr(backend, copy_name, copied)
        monkeypatch.setattr(backend, "_delete_each", deleted)
        store.rename_batch(entries)
        taken = [k for k, n in enumerate(events) if n > 1]
        last_copy = max(k for k, n in enumerate(events) if n == 0)
        assert taken and taken[0] < last_copy
        assert _renamed(store, entries)


@pytest.mark.parametrize("service", ["blob", "gcs"])
def test_sources_taken_along_that_fail_unforeseen_leave_their_files_not_renamed(
        service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deletes of sources held while the service was strained, taken along by a later
    file's, fail with an error the store does not know: none of those files counts as
    renamed, and every file that does has its source gone."""
    with _renames(service, 160, concurrency=256) as (_, store, entries):
        pin_strain(store, Pinned(False, after=20, until=40))
        backend = store.backend
        delete_each = backend._delete_each  # type: ignore[attr-defined]

        async def failing(objects: list[tuple[str, str]]) -> object:
            if len(objects) > 1:
                raise RuntimeError("unforeseen")
            return await delete_each(objects)

        monkeypatch.setattr(backend, "_delete_each", failing)
        done, failures = backend.rename_batch(entries)
        failed = {k for k, _ in failures}
        assert done == 160 and len(failed) >= 2
        assert all("unforeseen" in str(e) for _, e in failures)
        for k, (src, _, _, _) in enumerate(entries):
            if k not in failed:
                with pytest.raises(PathNotFoundError):
                    store.stat(src)


def test_a_refusing_service_gets_batches_too() -> None:
    """Throttled answers strain the service for a second: the deletes of sources whose
    copies land then join a batch."""
    with _renames("blob", 60) as (sim, store, entries):
        limit = store.backend.limit  # type: ignore[attr-defined]
        limit.strain.refused(limit.clock())
        store.rename_batch(entries)
        assert _top_level(sim, "delete_blob") == 0 and _top_level(sim, "blob_batch") >= 1
        assert _renamed(store, entries)


@pytest.mark.parametrize("service", ["blob", "gcs"])
def test_a_batch_of_deletes_failing_unforeseen_leaves_its_files_not_renamed(
        service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Blob Batch or GCS batch request of the sources' deletes that fails with an error the
    store does not know: none of its files counts as renamed (their sources may stand)."""
    with _renames(service, 80, latency_ms=1.0) as (_, store, entries):
        pin_strain(store, Pinned(True))

        async def broken(*_: object) -> None:
            raise RuntimeError("unforeseen")

        monkeypatch.setattr(store.backend, "_batch_delete", broken)
        done, failures = store.backend.rename_batch(entries)
        assert done == 80
        failed = {k for k, _ in failures}
        # every file whose source went in a batch is failed; one left alone may be deleted
        assert len(failed) >= 80 - 1
        assert all("unforeseen" in str(e) for _, e in failures)


# -- a whole commit: its requests and races in _SUCCESS ------------------------------------------


@pytest.mark.parametrize("service", ["adls", "blob", "gcs"])
def test_a_commit_counts_its_requests_and_keeps_its_races_within_the_budget(
        service: str) -> None:
    """A latency tail that would have a fifth of the requests raced (median 2 ms, p99 50 ms):
    copies stay within ``SHARE`` of the requests sent, and ``_SUCCESS`` counts them, each
    race won or wasted. The store's strain is pinned unstrained (a busy machine's own lag
    would otherwise stop the races this test counts)."""
    with start_cloud_sim(service=service, latency_ms=2.0, p99_ms=50.0, seed=9) as sim:
        config = CommitterConfig(storage_options=sim.trusted_options, store_processes=1)
        job = generate(sim, service, 600, 6, 5, f"j{uuid.uuid4().hex[:12]}", config)
        store = open_store(job.dest, config)
        pin_strain(store, Pinned(False))
        sim.reset_stats()
        summary = JobCommitter(job.dest, job.job_id, config=config, store=store).commit(
            job.committed)
        hedger = store.backend.hedger  # type: ignore[attr-defined]
        counters = summary.iostatistics.counters
        sent = counters[st.STORE_IO_REQUEST]
        raced = counters[st.STORE_IO_REQUEST_RACED]
        assert _check(sim, job)["destination_exact"]
        # up to _SUCCESS: not the cleanup after it, which the account answered too
        assert 0 < sent < sim.stats()["requests"]
        assert raced <= SHARE * sent and hedger.hedged <= SHARE * hedger.sent
        assert raced == counters[st.STORE_IO_REQUEST_RACE_WON] + counters[
            st.STORE_IO_REQUEST_RACE_WASTED]
        # a second commit on the same store begins its budget and latencies afresh
        store.commit_begins()
        assert (hedger.sent, hedger.hedged, hedger.delay) == (0, 0, None)
        store.close()
