from collections.abc import Iterator

import pytest

from committer.store.azure import AzureStore
from committer.store.gcs import GcsStore
from tests.emulator_fixtures import KINDS, azurite_emulator, cloud, cloud_sims, gcs_emulator
from tests.store.stub_fixtures import AdlsTarget, GcsMoveTarget, adls, adls_flat, gcs_move
from tests.store.targets import EmulatorTarget, RenamePath

__all__ = ["STORE_TARGETS", "azurite_emulator", "cloud", "cloud_sims", "gcs_emulator",
           "store_target"]

#: the stores the core suites' store-generic tests run on here: the two emulators, the two
#: rename paths neither has, on the local stubs (ADLS Gen2's Data Lake rename, GCS moveTo),
#: and the simulated account of the scale benchmark in its kinds (GCS with folders too: the
#: folder rename, a bucket with a hierarchical namespace), so that the simulation answers
#: the engine as the emulators and the stubs do
STORE_TARGETS = (*KINDS, "adls-hns", "gcs-move", "sim-adls", "sim-blob", "sim-gcs",
                 "sim-gcs-hns")


def _target(request: pytest.FixtureRequest, kind: str) -> EmulatorTarget:
    if kind == "adls-hns":
        # a fresh in-memory namespace account per test (stub_fixtures.adls)
        account: AdlsTarget = request.getfixturevalue("adls")
        stub = account.stub
        return EmulatorTarget(kind, "abfs", account.options, rename_path=RenamePath(
            lambda: list(stub.requests), "dfs_rename", frozenset({"copy_blob"})))
    if kind == "gcs-move":
        # a fresh move proxy per test in front of the session's fake-gcs-server
        bucket: GcsMoveTarget = request.getfixturevalue("gcs_move")
        proxy = bucket.proxy
        assert proxy is not None and proxy.move_supported
        return EmulatorTarget(kind, "gs", bucket.options, rename_path=RenamePath(
            lambda: list(proxy.requests), "move", frozenset({"rewrite", "copy"})))
    if kind.startswith("sim-"):
        sim = request.getfixturevalue("cloud_sims")[kind[4:]]
        options = sim.trusted_options
        if kind == "sim-gcs-hns":
            # one backend serves the test's fresh buckets (every one with folders here): it is
            # told, where a store opened for one destination asks that bucket
            # (tests/store/test_gcs_hns.py)
            options["committer_hierarchical"] = "true"
        return EmulatorTarget(kind, sim.scheme, options)
    emulator = request.getfixturevalue("azurite_emulator" if kind == "azurite" else "gcs_emulator")
    return EmulatorTarget.on_emulator(kind, emulator)


def _check_backend(target: EmulatorTarget) -> None:
    """The stub targets' backends are on the path they exist for."""
    backend = target.backend()
    if target.kind == "adls-hns":
        # the namespace is found by asking the account, as on a real one (not by an option)
        assert isinstance(backend, AzureStore)
        assert backend.hierarchical and backend.namespace_source == "account"
        assert backend.rename_keeps_etag and not backend.flat_walk
    elif target.kind == "gcs-move":
        assert isinstance(backend, GcsStore)
    elif target.kind in ("sim-adls", "sim-blob"):
        assert isinstance(backend, AzureStore)
        assert backend.hierarchical is (target.kind == "sim-adls")
        assert backend.namespace_source == "account"
    elif target.kind == "sim-gcs":
        assert isinstance(backend, GcsStore) and backend.trust_preconditions
    elif target.kind == "sim-gcs-hns":
        assert isinstance(backend, GcsStore) and backend.trust_preconditions
        assert backend.renames_directories


@pytest.fixture(params=STORE_TARGETS)
def store_target(request: pytest.FixtureRequest) -> Iterator[EmulatorTarget]:
    """Each store as the store under test of the core suites' store-generic tests (run here by
    ``test_core_on_emulators.py``); every root it hands out is a fresh bucket (container).

    On the stub targets the test errors at teardown if any request of the fallback rename
    (Copy Blob; rewrite + delete) reached the stub instead of the Data Lake rename / the move."""
    target = _target(request, str(request.param))
    try:
        _check_backend(target)
        yield target
        if target.rename_path is not None:
            target.rename_path.renames()  # asserts: no fallback request
    finally:
        target.close()

# Local stubs of the APIs the emulators lack (ADLS Gen2 DFS, GCS moveTo): stub_fixtures.py;
# the simulated accounts: cloud_sims (tests/emulator_fixtures.py)
__all__ += ["adls", "adls_flat", "gcs_move"]
