"""Regenerate ``tests/data/hadoop/``: real documents written by Hadoop's own ManifestCommitter.

Run with ``python -m tests.spark.generate_hadoop_fixtures [OUTPUT_DIR]`` (needs pyspark).
The job writes under a fixed local path containing spaces, unicode, ``#``, ``%`` and a
Hive-escaped partition value so the URI escaping of real Hadoop output is captured.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tests.spark.hadoop_interop import HadoopTask, run_hadoop_job

ROOT = Path("/tmp/manifest-committer-fixtures")
DEST = ROOT / "dest dir ü #%" / "table"
# A fixed job UUID keeps regenerated fixtures diffable.
JOB_UUID = "3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f"


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    out_dir = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "data" / "hadoop"
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ROOT, ignore_errors=True)
    diagnostics = ROOT / "diagnostics"
    summaries = ROOT / "summaries"
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("hadoop-manifest-fixtures")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        tasks = [
            HadoopTask(0, {f"part-00000-{JOB_UUID}.c000.csv": b"a,1\nb,2\n"}),
            HadoopTask(
                1,
                {
                    f"p=a b%3Ac/part-00001-{JOB_UUID}.c000.csv": b"c,3\n",
                    f"p=ü #/part-00001-{JOB_UUID}.c000.csv": b"d,4\ne,5\n",
                },
            ),
            HadoopTask(2, {f"p=a b%3Ac/q=2/part-00002-{JOB_UUID}.c000.csv": b""}),
        ]
        run_hadoop_job(
            spark,
            str(DEST),
            JOB_UUID,
            tasks,
            conf={
                "mapreduce.manifest.committer.diagnostics.manifest.directory": str(diagnostics),
                "mapreduce.manifest.committer.summary.report.directory": str(summaries),
            },
        )
    finally:
        spark.stop()

    # Hadoop moves the committed manifests to <diagnostics>/<jobId>/ after the commit.
    manifests = sorted((diagnostics / JOB_UUID).glob("*-manifest.json"))
    if len(manifests) != len(tasks):
        raise SystemExit(f"expected {len(tasks)} manifests, found {manifests}")
    for manifest in manifests:
        shutil.copyfile(manifest, out_dir / manifest.name)
    shutil.copyfile(DEST / "_SUCCESS", out_dir / "_SUCCESS")
    shutil.copyfile(summaries / f"summary-{JOB_UUID}.json", out_dir / f"summary-{JOB_UUID}.json")
    listing = sorted(
        str(p.relative_to(DEST)) for p in DEST.rglob("*") if p.is_file() and p.name != "_SUCCESS"
    )
    (out_dir / "destination-listing.json").write_text(
        json.dumps({"dest": str(DEST), "files": listing}, ensure_ascii=False, indent=2) + "\n",
        encoding="utf-8",
    )
    print(f"wrote {len(manifests)} manifests, _SUCCESS and summary to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
