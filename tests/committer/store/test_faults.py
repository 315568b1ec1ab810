"""FaultInjectingStore: scripted, seeded trouble, under the production retry logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from committer.errors import PathNotFoundError, TransientStoreError
from committer.store.faults import FaultInjectingStore, FaultPlan
from committer.store.local import LocalStore


def _faults(plan: FaultPlan) -> FaultInjectingStore:
    return FaultInjectingStore(LocalStore(), plan)


def test_no_plan_no_faults(tmp_path: Path) -> None:
    store = _faults(FaultPlan())
    store.write_bytes(str(tmp_path / "a"), b"a")
    store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"))
    assert store.read_bytes(str(tmp_path / "b")) == b"a"
    assert store.injected == 0


def test_rate_one_always_fails_before_doing_anything(tmp_path: Path) -> None:
    store = _faults(FaultPlan(rate=1.0, operations=frozenset({"write_bytes"})))
    with pytest.raises(TransientStoreError, match="injected"):
        store.write_bytes(str(tmp_path / "a"), b"a")
    assert not (tmp_path / "a").exists()
    store.mkdirs(str(tmp_path / "d"))  # other operations unaffected
    assert store.injected == 1


def test_after_fault_happens_then_times_out(tmp_path: Path) -> None:
    store = _faults(FaultPlan(after_rate=1.0))
    (tmp_path / "a").write_bytes(b"a")
    with pytest.raises(TransientStoreError, match="after rename"):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b").exists() and not (tmp_path / "a").exists()


def test_parent_missing_once_fires_once(tmp_path: Path) -> None:
    store = _faults(FaultPlan(parent_missing_once={"p=1"}))
    (tmp_path / "p=1").mkdir()
    (tmp_path / "a").write_bytes(b"a")
    with pytest.raises(PathNotFoundError):
        store.rename_file(str(tmp_path / "a"), str(tmp_path / "p=1" / "a"))
    store.rename_file(str(tmp_path / "a"), str(tmp_path / "p=1" / "a"))
    assert (tmp_path / "p=1" / "a").exists()


def test_disabled_store_injects_nothing(tmp_path: Path) -> None:
    store = _faults(FaultPlan(rate=1.0, after_rate=1.0, parent_missing_once={"x"}))
    store.enabled = False
    (tmp_path / "a").write_bytes(b"a")
    store.rename_file(str(tmp_path / "a"), str(tmp_path / "x"))
    assert store.injected == 0


def _pattern(seed: int, tmp_path: Path) -> list[bool]:
    store = _faults(FaultPlan(rate=0.5, seed=seed))
    out = []
    for _ in range(40):
        try:
            store.stat(str(tmp_path))
            out.append(True)
        except TransientStoreError:
            out.append(False)
    return out


def test_faults_are_seeded_and_replayable(tmp_path: Path) -> None:
    assert _pattern(1, tmp_path) == _pattern(1, tmp_path)
    assert _pattern(1, tmp_path) != _pattern(2, tmp_path)
    assert 5 < _pattern(1, tmp_path).count(False) < 35


def test_listings_fail_inside_walks(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = _faults(FaultPlan(rate=1.0, operations=frozenset({"list_dir"})))
    with pytest.raises(TransientStoreError):
        list(store.walk_files(str(tmp_path)))


def test_wrapper_mirrors_the_inner_stores_capabilities() -> None:
    store = _faults(FaultPlan())
    assert store.name == "local" and store.rename_keeps_etag and store.supports_etags
