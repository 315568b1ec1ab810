"""A PySpark driver writing to a cloud store through Hadoop's connector that dies by SIGKILL in
the middle of its job commit (test harness only).

    python -m tests.spark.cloud_crash_driver SETUP_JSON DEST ROWS PARTITIONS KILL_AFTER [MODE]

``SETUP_JSON`` names a file ``{"jars": [...], "hadoop": {key: value}}``: the connector jars
for the session's classpath and the Hadoop keys reaching the store (given as
``spark.hadoop.*``, as a cluster's ``spark-defaults.conf`` would). The driver writes ``ROWS``
rows partitioned into ``PARTITIONS`` directories under ``DEST`` (``MODE``: ``append``, the
default, or ``overwrite``), two tasks each writing every partition, and its whole process
group (driver, JVM, engine) is killed once the job commit has renamed ``KILL_AFTER`` data
files: the engine process runs ``tests.spark.crash_driver``'s kill switch on the cloud
backends' renames (``AsyncStore``), placed by count, not by time.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.spark.crash_driver import READY, install_kill_switch


def engine(argv: list[str]) -> int:
    from committer.spark.driver import main as serve
    from committer.store._aio import AsyncStore

    install_kill_switch(int(argv[0]), AsyncStore)
    return serve(["--serve"])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--engine"]:
        return engine(argv[1:])
    setup = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    dest, rows, partitions, kill_after = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    mode = argv[5] if len(argv) > 5 else "append"
    from pyspark.sql import SparkSession

    import committer.spark
    from committer.testing.engine_python import engine_python

    work = Path(tempfile.mkdtemp(prefix="cloud-crash-engine-"))
    python = engine_python(work, "tests.spark.cloud_crash_driver", "--engine", str(kill_after))
    jars = list(setup["jars"])
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("manifest-committer-cloud-crash-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
    )
    for key, value in setup["hadoop"].items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    builder = committer.spark.configure(builder).config(committer.spark.PYTHON_KEY, str(python))
    classpath = builder._options["spark.driver.extraClassPath"]
    builder = builder.config("spark.driver.extraClassPath", ":".join([classpath, *jars]))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(READY, flush=True)
    spark.range(0, rows, numPartitions=2) \
        .selectExpr("id", f"cast(id % {partitions} as int) as p") \
        .write.mode(mode).partitionBy("p").parquet(dest)
    spark.stop()
    print("cloud-crash-driver: the job committed; the kill switch never fired", flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
