"""Session-scoped emulator fixtures: Azurite and fake-gcs-server, started once per test run.

Import these names into a ``conftest.py`` to use them. A missing emulator is an error, not a
skip: run ``npm ci`` (Azurite) and install the ``bench`` extra (fake-gcs-server), or deselect
the suites with ``-m "not emulator"``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from committer.config import CommitterConfig
from committer.store import ManagedStore, open_backend, open_store
from committer.store.base import Store
from committer.testing.cloud_sim import CloudSim, SimOptions
from committer.testing.emulators import RunningEmulator, start_azurite, start_fake_gcs_server

KINDS = ("azurite", "gcs")
#: the simulated account's kinds (``committer.testing.cloud_sim``); gcs-hns: GCS, its buckets
#: with a hierarchical namespace (folders) and the move API
SIM_KINDS = ("adls", "blob", "gcs", "gcs-hns")


@pytest.fixture(scope="session")
def azurite_emulator() -> Iterator[RunningEmulator]:
    emu = start_azurite()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[RunningEmulator]:
    emu = start_fake_gcs_server()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture(scope="session")
def cloud_sims() -> Iterator[dict[str, CloudSim]]:
    """One simulated account of each kind for the session, started on first use, latency off
    (the scale benchmark models latency; tests want speed), signatures checked."""
    sims: dict[str, CloudSim] = {}

    class Lazy(dict[str, CloudSim]):
        def __missing__(self, kind: str) -> CloudSim:
            hns = kind == "gcs-hns"
            sim = CloudSim(SimOptions(service="gcs" if hns else kind, latency_ms=0, seed=11,
                                      gcs_hns=hns, gcs_move=hns)).start()
            sims[kind] = self[kind] = sim
            return sim

    try:
        yield Lazy()
    finally:
        for sim in sims.values():
            sim.stop()


@dataclass
class CloudTarget:
    """A fresh, empty bucket/container in one emulator, and how to reach it."""

    kind: str
    emulator: RunningEmulator
    root: str  # scheme://bucket
    options: dict[str, Any]
    opened: list[Store] = field(default_factory=list)

    def url(self, *parts: str) -> str:
        tail = "/".join(p.strip("/") for p in parts if p)
        return f"{self.root}/{tail}" if tail else self.root

    def backend(self) -> Store:
        store = open_backend(self.root, self.options)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()

    def config(self, **overrides: Any) -> CommitterConfig:
        # fast retries: tests inject throttling and must not sleep for seconds
        base: dict[str, Any] = {"storage_options": self.options, "retry_attempts": 12,
                                "retry_initial_delay_ms": 5, "retry_max_delay_ms": 100,
                                "io_threads": 8}
        base.update(overrides)
        return CommitterConfig(**base)

    def managed(self, backend: Store | None = None, **overrides: Any) -> ManagedStore:
        return open_store(self.root, self.config(**overrides), backend=backend or self.backend())


@pytest.fixture(params=KINDS)
def cloud(request: pytest.FixtureRequest) -> Iterator[CloudTarget]:
    """A new bucket (container) per test in each emulator: tests never see each other's
    objects, and the emulators do not slow down as one container fills."""
    kind = str(request.param)
    emu: RunningEmulator = request.getfixturevalue(
        "azurite_emulator" if kind == "azurite" else "gcs_emulator")
    bucket = f"t{uuid.uuid4().hex[:16]}"
    target = CloudTarget(kind, emu, emu.url(bucket), dict(emu.storage_options))
    target.backend().mkdirs(target.root)  # creates the bucket / container
    try:
        yield target
    finally:
        target.close()
