"""Simulators shared by a test session (latency off: each test resets the account first), and
fresh ones for tests that need other options."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from committer.testing.cloud_sim import CloudSim, SimOptions


def _session_sim(**options: object) -> Iterator[CloudSim]:
    sim = CloudSim(SimOptions(latency_ms=0, seed=7, **options)).start()  # type: ignore[arg-type]
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="session")
def _adls_session() -> Iterator[CloudSim]:
    yield from _session_sim(service="adls")


@pytest.fixture(scope="session")
def _blob_session() -> Iterator[CloudSim]:
    yield from _session_sim(service="blob")


@pytest.fixture(scope="session")
def _gcs_session() -> Iterator[CloudSim]:
    yield from _session_sim(service="gcs", gcs_move=True)


@pytest.fixture
def adls(_adls_session: CloudSim) -> CloudSim:
    """A namespace (ADLS Gen2) account, emptied, faults cleared, statistics reset."""
    _adls_session.reset()
    return _adls_session


@pytest.fixture
def blob(_blob_session: CloudSim) -> CloudSim:
    """A flat Blob account, emptied."""
    _blob_session.reset()
    return _blob_session


@pytest.fixture
def gcs(_gcs_session: CloudSim) -> CloudSim:
    """A GCS account with the objects move API, emptied."""
    _gcs_session.reset()
    return _gcs_session


@pytest.fixture(params=["adls", "blob"])
def azure(request: pytest.FixtureRequest) -> CloudSim:
    """Each Azure account kind, emptied."""
    sim: CloudSim = request.getfixturevalue(str(request.param))
    return sim
