"""The simulated account as Spark reaches it through Hadoop's own connectors, for the Spark suite.

One simulator process per service for the whole test session (latency off), and for each the
Hadoop keys a user would set to point the connector (and the engine, which reads the same
keys) at it: ``committer/testing/connector_keys.py`` says which and why. On gcs the account
serves the objects move API, which the real service has and both connectors use for a rename.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from committer.config import CommitterConfig
from committer.store import open_store
from committer.store.credentials import config_for_location
from committer.store.managed import ManagedStore
from committer.testing.cloud_sim import CloudSim
from committer.testing.connector_keys import connector_keys

#: the rate limit the tests give ABFS's key; the engine's summary must say it got it
AZURE_RATE_LIMIT = "4321"


@dataclass(frozen=True)
class CloudTarget:
    """One service of the simulated account, as Spark's connector and the engine reach it."""

    name: str
    sim: CloudSim
    #: the URI of the container (filesystem, bucket) the tests write under
    root: str
    #: its container's name in the simulator
    bucket: str
    hadoop: Mapping[str, str] = field(default_factory=dict)

    def uri(self, name: str) -> str:
        return f"{self.root}/{name}"

    def key(self, uri: str) -> str:
        """The object key of ``uri`` in the simulator."""
        return uri.removeprefix(self.root + "/")

    def cli_conf(self) -> list[str]:
        """``manifest-committer`` arguments giving the same Hadoop keys."""
        out: list[str] = []
        for k, v in self.hadoop.items():
            out += ["--conf", f"{k}={v}"]
        return out

    def engine_store(self, uri: str) -> ManagedStore:
        """The engine's own store of ``uri``, built from the same keys as a job's."""
        return open_store(uri, config_for_location(CommitterConfig(), dict(self.hadoop), uri))

    def objects(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Every object under ``prefix`` (a key), by key."""
        return {o["key"]: o for o in self.sim.objects(self.bucket, prefix)
                if not o["is_dir"]}


def adls_target(sim: CloudSim) -> CloudTarget:
    sim.populate([{"bucket": "lake", "key": "README", "data_b64": ""}])
    root, keys = connector_keys(sim, "adls", "lake", engine=True)
    return CloudTarget("adls", sim, root, "lake",
                       {**keys, "fs.azure.io.rate.limit": AZURE_RATE_LIMIT})


def blob_target(sim: CloudSim) -> CloudTarget:
    """A flat (no namespace) account through ABFS's Blob client (Hadoop 3.5)."""
    sim.populate([{"bucket": "flat", "key": "README", "data_b64": ""}])
    root, keys = connector_keys(sim, "blob", "flat", engine=True)
    return CloudTarget("blob", sim, root, "flat",
                       {**keys, "fs.azure.io.rate.limit": AZURE_RATE_LIMIT})


def gcs_target(sim: CloudSim) -> CloudTarget:
    sim.populate([{"bucket": "pail", "key": "README", "data_b64": ""}])
    root, keys = connector_keys(sim, "gcs", "pail", engine=True)
    return CloudTarget("gcs", sim, root, "pail", keys)


@contextmanager
def hadoop_conf(spark: Any, target: CloudTarget) -> Iterator[None]:
    """The target's Hadoop keys as runtime options of the session (Spark copies them into
    each job's Hadoop configuration, the shim forwards the engine's share) for the block."""
    saved = {k: spark.conf.get(k, None) for k in target.hadoop}
    for k, v in target.hadoop.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)
