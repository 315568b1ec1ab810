"""A Spark Connect client process (test harness): partitioned writes through a Connect server.

    python -m tests.spark.connect_client sc://HOST:PORT DEST

Writes a partitioned parquet table at DEST, then appends, overwrites statically, and overwrites
dynamically. After each write it prints one JSON line: the step, the rows read back through
Connect, and the destination's ``_SUCCESS`` document. A separate process, as a Connect client
is: it never holds a Py4J gateway or a JVM of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(url: str, dest: str) -> int:
    from pyspark.sql import SparkSession

    spark: Any = SparkSession.builder.remote(url).getOrCreate()

    def frame(start: int, end: int, parts: int = 2) -> Any:
        return spark.range(start, end, numPartitions=parts).selectExpr(
            "id", "cast(id % 3 as int) as p")

    def report(step: str) -> None:
        got = sorted((r[0], r[1]) for r in spark.read.parquet(dest).collect())
        success = json.loads((Path(dest) / "_SUCCESS").read_text(encoding="utf-8"))
        print(json.dumps({"step": step, "rows": got, "success": success}), flush=True)

    frame(0, 30).write.partitionBy("p").parquet(dest)
    report("create")
    frame(30, 36).write.mode("append").partitionBy("p").parquet(dest)
    report("append")
    frame(100, 109).write.mode("overwrite").partitionBy("p").parquet(dest)
    report("overwrite")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    # Only partition p=1 is written: p=0 and p=2 keep the rows of the static overwrite.
    spark.range(200, 202).selectExpr("id", "1 as p").write.mode("overwrite") \
        .partitionBy("p").parquet(dest)
    report("dynamic overwrite")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
