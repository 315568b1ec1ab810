"""A PySpark driver run from an installed wheel (test harness for test_wheel.py and
``make test-pythons``).

    python wheel_driver.py [--conf-only] DEST

Run by path from outside the source tree, so ``committer`` is the installed package. Creates a
local session, writes a partitioned parquet table, reads it back, and prints one JSON line:
pyspark's version, the jar used, the row count, the interpreter. The session is set up with
``committer.spark.configure`` (no jar given), or with ``--conf-only`` as a job that does not
import the package would be: the jar that ``python -m committer.spark.build --output DIR``
copies out, and the ``--conf`` lines of docs/spark.md (jar on the classpath, the protocol
class, the engine's interpreter), nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PROTOCOL_CLASS = "manifestcommitter.spark.ManifestCommitProtocol"


def _conf_only(builder: Any, jar_dir: str) -> tuple[Any, str]:
    subprocess.run([sys.executable, "-m", "committer.spark.build", "--output", jar_dir],
                   check=True, stdout=subprocess.DEVNULL)
    jar = str(Path(jar_dir) / "committer-shim.jar")
    for key, value in (("spark.jars", jar), ("spark.driver.extraClassPath", jar),
                       ("spark.sql.sources.commitProtocolClass", PROTOCOL_CLASS),
                       ("spark.manifest.committer.python", sys.executable)):
        builder = builder.config(key, value)
    return builder, jar


def main(argv: list[str]) -> int:
    conf_only = argv[:1] == ["--conf-only"]
    dest = argv[-1]
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    with tempfile.TemporaryDirectory() as jar_dir:
        if conf_only:
            builder, jar = _conf_only(builder, jar_dir)
        else:
            import committer.spark

            builder = committer.spark.configure(builder)
            jar = str(committer.spark.jar_path())
        spark = builder.getOrCreate()
        df = spark.range(0, 60, numPartitions=3).selectExpr("id", "cast(id % 4 as int) as p")
        df.write.partitionBy("p").parquet(dest)
        count = spark.read.parquet(dest).count()
        protocol = spark.conf.get("spark.sql.sources.commitProtocolClass")
        version = spark.version
        spark.stop()
    import committer

    result = {
        "pyspark": version,
        "committer_module": str(Path(committer.__file__).parent / "spark" / "__init__.py"),
        "jar": jar,
        "protocol": protocol,
        "python": sys.version.split()[0],
        "rows": count,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
