"""Fixtures for the local stubs of the store APIs the emulators lack.

- ``adls`` / ``adls_flat``: an in-memory Azure account (``committer.testing.adls_stub``) with
  and without a hierarchical namespace, a fresh one per test (starting one takes milliseconds).
  No emulator process is needed.
- ``gcs_move``: the objects move API (``committer.testing.gcs_move_proxy``) in front of the
  session's fake-gcs-server, a fresh proxy and bucket per test.

``adls`` and ``gcs_move`` are also what the ``adls-hns`` and ``gcs-move`` targets of
``store_target`` (``conftest.py``) stand on, to run the core suites on those rename paths.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

from committer.config import CommitterConfig
from committer.store import ManagedStore, open_store
from committer.store.azure import AzureStore, open_azure
from committer.store.base import Store
from committer.store.gcs import GcsStore, open_gcs
from committer.testing.adls_stub import AdlsStub
from committer.testing.emulators import RunningEmulator
from committer.testing.gcs_move_proxy import GcsMoveProxy


def fast_config(options: dict[str, Any], **overrides: Any) -> CommitterConfig:
    # fast retries: tests inject throttling and must not sleep for seconds
    base: dict[str, Any] = {"storage_options": options, "retry_attempts": 12,
                            "retry_initial_delay_ms": 5, "retry_max_delay_ms": 100,
                            "io_threads": 8}
    base.update(overrides)
    return CommitterConfig(**base)


@dataclass
class _Target:
    root: str
    options: dict[str, Any]
    opened: list[Store] = field(default_factory=list)

    def url(self, *parts: str) -> str:
        tail = "/".join(p.strip("/") for p in parts if p)
        return f"{self.root}/{tail}" if tail else self.root

    def config(self, **overrides: Any) -> CommitterConfig:
        return fast_config(self.options, **overrides)

    def managed(self, backend: Store | None = None, **overrides: Any) -> ManagedStore:
        return open_store(self.root, self.config(**overrides),
                          backend=backend or self._open(self.options))

    def _open(self, options: dict[str, Any]) -> Store:
        raise NotImplementedError

    def close(self) -> None:
        for store in self.opened:
            store.close()
        self.opened.clear()


@dataclass
class AdlsTarget(_Target):
    """A fresh filesystem (container) in an :class:`AdlsStub` account."""

    stub: AdlsStub = field(default_factory=AdlsStub)
    container: str = ""

    def backend(self, **options: Any) -> AzureStore:
        store = self._open({**self.options, **options})
        assert isinstance(store, AzureStore)
        return store

    def _open(self, options: dict[str, Any]) -> Store:
        store = open_azure(self.root, options)
        self.opened.append(store)
        return store


@dataclass
class GcsMoveTarget(_Target):
    """A fresh bucket reached through a :class:`GcsMoveProxy` in front of fake-gcs-server."""

    proxy: GcsMoveProxy | None = None
    emulator: RunningEmulator | None = None
    bucket: str = ""

    def backend(self) -> GcsStore:
        store = self._open(self.options)
        assert isinstance(store, GcsStore)
        return store

    def _open(self, options: dict[str, Any]) -> Store:
        store = open_gcs(self.root, options)
        self.opened.append(store)
        return store

    def object(self, name: str) -> dict[str, Any] | None:
        """The emulator's own record of an object (generation included), read past the proxy."""
        assert self.emulator is not None
        url = (f"{self.emulator.endpoint}/storage/v1/b/{quote(self.bucket, safe='')}/o/"
               f"{quote(name, safe='')}")
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                found: dict[str, Any] = json.loads(r.read())
                return found
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise


def _adls(hierarchical: bool) -> Iterator[AdlsTarget]:
    stub = AdlsStub(hierarchical=hierarchical).start()
    container = f"fs{uuid.uuid4().hex[:12]}"
    target = AdlsTarget(f"abfs://{container}", dict(stub.storage_options), stub=stub,
                        container=container)
    try:
        target.backend().mkdirs(target.root)  # creates the filesystem (container)
        stub.reset_log()
        yield target
    finally:
        target.close()
        stub.stop()


@pytest.fixture
def adls() -> Iterator[AdlsTarget]:
    """An ADLS Gen2 account (hierarchical namespace) in memory: Blob and DFS endpoints."""
    yield from _adls(True)


@pytest.fixture
def adls_flat() -> Iterator[AdlsTarget]:
    """The same stub as a flat Blob account (no namespace; its DFS endpoint refuses)."""
    yield from _adls(False)


@pytest.fixture
def gcs_move(gcs_emulator: RunningEmulator) -> Iterator[GcsMoveTarget]:
    """fake-gcs-server behind a proxy that implements ``moveTo``; a new bucket per test."""
    proxy = GcsMoveProxy(gcs_emulator.endpoint).start()
    bucket = f"m{uuid.uuid4().hex[:16]}"
    target = GcsMoveTarget(f"gs://{bucket}", dict(proxy.storage_options), proxy=proxy,
                           emulator=gcs_emulator, bucket=bucket)
    try:
        target.backend().mkdirs(target.root)  # creates the bucket
        proxy.reset_log()
        yield target
    finally:
        target.close()
        proxy.stop()
