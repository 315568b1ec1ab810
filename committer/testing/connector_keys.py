"""The Hadoop keys that point Hadoop's own cloud connectors (and this engine, which reads the same
keys) at the simulated account; shared by the Spark suite (``tests/spark/cloud_stores.py``) and
the benchmarks that run the real connectors (``benchmarks/cloud_peers``).

- ``adls``: a namespace (Data Lake) account through hadoop-azure's ABFS, against the
  simulator's DFS endpoint (``fs.azure.abfs.endpoint`` with the account in the path, plain
  http, Shared Key). ABFS 3.5 defaults to the Apache HTTP client, which over plain http
  finds no SSL socket factory and fails to start; ``fs.azure.networking.library`` names
  the JDK's client instead. The engine reaches the same DFS endpoint from the same key, and
  the simulator's Blob endpoint (a port of its own here; one host for both on Azure) from
  ``fs.azure.blob.endpoint`` (given when ``engine`` is asked for).
- ``blob``: a flat (no namespace) account through ABFS's Blob client (Hadoop 3.5): the
  namespace known (``fs.azure.account.hns.enabled``: ABFS would otherwise probe it with a
  Data Lake request at the Blob endpoint its override names), the Blob service for
  everything (``fs.azure.fns.account.service.type``, ``fs.azure.ingress.service.type``).
  The engine reaches the same host:port from ``fs.azure.abfs.endpoint`` and learns the
  account is flat by asking it.
- ``gcs``: Google's GCS connector against the simulator (``fs.gs.storage.root.url``),
  unauthenticated in the keys of both its lines (v3+ ``fs.gs.auth.type``, v2's null
  credential, which needs service accounts off): never the metadata server. Hadoop 3.5's
  ``core-default.xml`` names its own GCS filesystem (``org.apache.hadoop.fs.gs``, not in
  pyspark's jars) for ``gs://`` and sets ``fs.gs.block.size`` to ``64m``, which Google's
  connector reads as a plain number and refuses: both are set here.
"""

from __future__ import annotations

from committer.testing.cloud_sim import CloudSim
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

__all__ = ["ACCOUNT_HOST", "CONNECTOR_SERVICES", "connector_keys"]

ACCOUNT_HOST = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"
#: every service of the simulator has a connector on Spark 4.3's Hadoop 3.5
CONNECTOR_SERVICES = ("adls", "blob", "gcs")


def connector_keys(sim: CloudSim, service: str, bucket: str, *, engine: bool = False
                   ) -> tuple[str, dict[str, str]]:
    """The container ``bucket``'s URI as the connector names it, and the Hadoop keys pointing
    the connector of ``service`` at ``sim``; with ``engine``, also what this engine needs
    beyond the connector's keys."""
    if service not in CONNECTOR_SERVICES:
        raise ValueError(f"no connector for {service!r}; known: {', '.join(CONNECTOR_SERVICES)}")
    if service == "gcs":
        return f"gs://{bucket}", {
            "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
            "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
            "fs.gs.storage.root.url": sim.gcs_endpoint + "/",
            "fs.gs.auth.type": "UNAUTHENTICATED",
            "fs.gs.auth.null.enable": "true",
            "fs.gs.auth.service.account.enable": "false",
            "fs.gs.project.id": "sim",
            "fs.gs.block.size": str(64 << 20),
        }
    keys = {
        "fs.azure.always.use.https": "false",
        "fs.azure.account.auth.type": "SharedKey",
        f"fs.azure.account.key.{ACCOUNT_HOST}": AZURITE_KEY,
        "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
    }
    if service == "adls":
        keys["fs.azure.abfs.endpoint"] = f"127.0.0.1:{sim.ports['dfs']}"
        if engine:
            keys["fs.azure.blob.endpoint"] = sim.blob_endpoint
    else:
        keys.update({"fs.azure.abfs.endpoint": f"127.0.0.1:{sim.ports['blob']}",
                     "fs.azure.account.hns.enabled": "false",
                     "fs.azure.fns.account.service.type": "BLOB",
                     "fs.azure.ingress.service.type": "BLOB"})
    return f"abfs://{bucket}@{ACCOUNT_HOST}", keys
