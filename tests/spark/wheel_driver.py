"""A PySpark driver run from an installed wheel (test harness for test_wheel.py).

    python wheel_driver.py DEST

Run by path from outside the source tree, so ``committer`` is the installed package. Creates a
local session with ``committer.spark.configure`` (no jar given), writes a partitioned parquet
table, reads it back, and prints one JSON line: pyspark's version, the jar used, the row count.
"""

from __future__ import annotations

import json
import sys


def main(dest: str) -> int:
    from pyspark.sql import SparkSession

    import committer.spark

    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    spark = committer.spark.configure(builder).getOrCreate()
    df = spark.range(0, 60, numPartitions=3).selectExpr("id", "cast(id % 4 as int) as p")
    df.write.partitionBy("p").parquet(dest)
    count = spark.read.parquet(dest).count()
    result = {
        "pyspark": spark.version,
        "committer_module": committer.spark.__file__,
        "jar": str(committer.spark.jar_path()),
        "rows": count,
    }
    spark.stop()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
