"""A simulated cloud storage account for scale benchmarks: Azure Blob + Data Lake (DFS) or the
GCS JSON API, in memory, in its own process, on 127.0.0.1, with a latency model, an account
throttle, faults, and its own CPU and memory measured apart from the client's.

    with start_cloud_sim(service="adls", latency_ms=20, p99_ms=200) as sim:
        sim.populate({"bucket": "data", "key": f"src/f{i}", "size": 1000} for i in range(n))
        sim.reset_stats()
        store = open_backend("abfs://data", sim.storage_options)
        ...
        print(sim.stats()["cpu"])

Modules: ``namespace`` (the store), ``azure_blob`` / ``azure_dfs`` / ``gcs_json`` (the APIs,
``azure_common`` what the two Azure endpoints share; ``gcs_folders`` the folders of a GCS
bucket with a hierarchical namespace, ``gcs_rates`` a GCS bucket's documented request rates
and their ramp), ``multipart`` (batches, uploads),
``shared_key`` (Azure Shared Key), ``latency``, ``throttle``, ``faults``, ``stats``,
``timeline``, ``server`` (the HTTP/1.1 server and each request's path), ``control`` (the
control API), ``options``, ``process`` (the child process and its handle), ``__main__``.
"""

from committer.testing.cloud_sim.options import SimOptions
from committer.testing.cloud_sim.process import CloudSim, CloudSimError, start_cloud_sim

__all__ = ["CloudSim", "CloudSimError", "SimOptions", "start_cloud_sim"]
