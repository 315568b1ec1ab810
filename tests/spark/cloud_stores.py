"""The simulated account as Spark reaches it through Hadoop's own connectors, for the Spark suite.

One simulator process per service for the whole test session (latency off), and for each the
Hadoop keys a user would set to point the connector at it:

- ``adls``: a namespace (Data Lake) account through hadoop-azure's ABFS, against the
  simulator's DFS endpoint (``fs.azure.abfs.endpoint`` with the account in the path, plain
  http, Shared Key). ABFS 3.5 defaults to the Apache HTTP client, which over plain http
  finds no SSL socket factory and fails to start; ``fs.azure.networking.library`` names
  the JDK's client instead. The engine reaches the same DFS endpoint from the same key, and
  the simulator's Blob endpoint (a port of its own here; one host for both on Azure) from
  ``fs.azure.blob.endpoint``.
- ``gcs``: Google's GCS connector against the simulator (``fs.gs.storage.root.url``),
  unauthenticated in the keys of both its lines (v3+ ``fs.gs.auth.type``, v2's null
  credential, which needs service accounts off): never the metadata server. Hadoop 3.5's
  ``core-default.xml`` names its own GCS filesystem (``org.apache.hadoop.fs.gs``, not in
  pyspark's jars) for ``gs://`` and sets ``fs.gs.block.size`` to ``64m``, which Google's
  connector reads as a plain number and refuses: both are set here. The account serves
  the objects move API, which the real service has and both connectors use for a rename.
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
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

#: the rate limit the tests give ABFS's key; the engine's summary must say it got it
AZURE_RATE_LIMIT = "4321"
ACCOUNT_HOST = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"


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
    return CloudTarget("adls", sim, f"abfs://lake@{ACCOUNT_HOST}", "lake", {
        "fs.azure.abfs.endpoint": f"127.0.0.1:{sim.ports['dfs']}",
        "fs.azure.always.use.https": "false",
        "fs.azure.account.auth.type": "SharedKey",
        f"fs.azure.account.key.{ACCOUNT_HOST}": AZURITE_KEY,
        "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
        "fs.azure.blob.endpoint": sim.blob_endpoint,
        "fs.azure.io.rate.limit": AZURE_RATE_LIMIT,
    })


def blob_target(sim: CloudSim) -> CloudTarget:
    """A flat (no namespace) account through ABFS's Blob client (Hadoop 3.5): the namespace
    known (``fs.azure.account.hns.enabled``: ABFS would otherwise probe it with a Data Lake
    request at the Blob endpoint its override names), the Blob service for everything
    (``fs.azure.fns.account.service.type``, ``fs.azure.ingress.service.type``). The engine
    reaches the same host:port from ``fs.azure.abfs.endpoint`` and learns the account is
    flat by asking it."""
    sim.populate([{"bucket": "flat", "key": "README", "data_b64": ""}])
    return CloudTarget("blob", sim, f"abfs://flat@{ACCOUNT_HOST}", "flat", {
        "fs.azure.abfs.endpoint": f"127.0.0.1:{sim.ports['blob']}",
        "fs.azure.always.use.https": "false",
        "fs.azure.account.auth.type": "SharedKey",
        f"fs.azure.account.key.{ACCOUNT_HOST}": AZURITE_KEY,
        "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
        "fs.azure.account.hns.enabled": "false",
        "fs.azure.fns.account.service.type": "BLOB",
        "fs.azure.ingress.service.type": "BLOB",
        "fs.azure.io.rate.limit": AZURE_RATE_LIMIT,
    })


def gcs_target(sim: CloudSim) -> CloudTarget:
    sim.populate([{"bucket": "pail", "key": "README", "data_b64": ""}])
    return CloudTarget("gcs", sim, "gs://pail", "pail", {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        "fs.gs.storage.root.url": sim.gcs_endpoint + "/",
        "fs.gs.auth.type": "UNAUTHENTICATED",
        "fs.gs.auth.null.enable": "true",
        "fs.gs.auth.service.account.enable": "false",
        "fs.gs.project.id": "sim",
        "fs.gs.block.size": str(64 << 20),
    })


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
