"""The driver-side engine maps the Hadoop store keys a Spark user already set (no session)."""

from __future__ import annotations

from committer.config import DEFAULT_CLOUD_RATE_LIMIT
from committer.spark import engine

ACCOUNT_KEY = "c2VjcmV0LWFjY291bnQta2V5"  # a made-up base64 key: it must never be shown


def test_hadoop_azure_keys_become_the_engines_storage_options() -> None:
    request = {
        "operation": "setupJob",
        "destinationUri": "abfs://data@myacct.dfs.core.windows.net/table",
        "jobId": "job-creds",
        "conf": {
            "spark.hadoop.fs.azure.account.key.myacct.dfs.core.windows.net": ACCOUNT_KEY,
            "spark.hadoop.mapreduce.manifest.committer.io.threads": "8",
        },
    }
    job = engine._job(request)
    try:
        assert job.config.storage_options["account_name"] == "myacct"
        assert job.config.storage_options["account_key"] == ACCOUNT_KEY
        assert job.config.io_threads == 8
        # no rate key set: not Hadoop's 1,000/s but the cloud stores' default cap
        assert job.config.io_rate_limit is None
        assert job.store.rate_limit == DEFAULT_CLOUD_RATE_LIMIT == 20_000
        assert ACCOUNT_KEY not in repr(job.config)
    finally:
        job.store.backend.close()
