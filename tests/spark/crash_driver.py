"""A PySpark driver that dies by SIGKILL in the middle of its job commit (test harness only).

    python -m tests.spark.crash_driver DEST ROWS PARTITIONS KILL_AFTER_RENAMES [no-etags]

Creates its own local session through ``committer.spark.configure``, writes ``ROWS`` rows
partitioned into ``PARTITIONS`` directories under ``DEST``, and kills its whole process group
(this Python driver, its JVM and the engine process, as a lost driver machine would) once the
job commit has renamed ``KILL_AFTER_RENAMES`` data files into the destination.

The kill switch is a wrapper around the local store's rename calls (the batch loop
``rename_batch`` the job commit uses, and single ``rename_file`` calls) in the engine process,
which the session runs as ``python -m tests.spark.crash_driver --engine KILL_AFTER [no-etags]``;
no production code path knows about it. With ``no-etags``, the committed task manifests lose
their file identities (``e``) just before job commit reads them, as Hadoop's own task committer
would have written them.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from committer.errors import StoreError
from committer.store.base import Store
from committer.store.local import LocalStore

READY = "crash-driver: session ready"


def install_kill_switch(kill_after: int, store_class: type[Any] = LocalStore) -> None:
    """Kill this process group once ``kill_after`` data files were renamed into the
    destination by ``store_class``'s renames (local disk; or ``AsyncStore``, under every
    cloud backend)."""
    original_file, original_batch = store_class.rename_file, store_class.rename_batch
    lock = threading.Lock()
    inside_run = threading.local()
    renamed = 0

    def count(dst: str) -> None:
        nonlocal renamed
        # Data files renamed into the destination by the job commit's rename stage; not the
        # committer's own bookkeeping (journal, markers, moved-aside data).
        if "/_temporary/" in dst or "/_manifest_committer/" in dst or "/_SUCCESS" in dst:
            return
        with lock:
            renamed += 1
            if renamed < kill_after:
                return
        sys.stdout.flush()
        os.killpg(os.getpgid(0), signal.SIGKILL)

    def rename_file(self: Store, src: str, dst: str) -> None:
        original_file(self, src, dst)
        if not getattr(inside_run, "active", False):
            count(dst)

    def rename_batch(self: Store, entries: Sequence[tuple[str, str, Any, Any]],
                     start: int = 0) -> tuple[int, list[tuple[int, StoreError]]]:
        # One entry per call into the real loop, so the kill lands between two renames.
        inside_run.active = True
        try:
            for i in range(start, len(entries)):
                reached, failures = original_batch(self, entries[: i + 1], i)
                if failures:
                    return reached, failures
                count(entries[i][1])
        finally:
            inside_run.active = False
        return len(entries), []

    store_class.rename_file = rename_file
    store_class.rename_batch = rename_batch


def strip_identities_before_job_commit() -> None:
    import orjson

    from committer.job.committer import JobCommitter

    original = JobCommitter.commit

    def commit(self: JobCommitter, *args: Any, **kwargs: Any) -> Any:
        for path in Path(self.layout.manifests_dir).glob("*-manifest.json"):
            doc = orjson.loads(path.read_bytes())
            for entry in doc.get("files", []):
                entry.pop("e", None)
            path.write_bytes(orjson.dumps(doc))
        return original(self, *args, **kwargs)

    JobCommitter.commit = commit  # type: ignore[method-assign]


def engine(argv: list[str]) -> int:
    """The engine process, with the kill switch (and, with ``no-etags``, the identities gone)."""
    from committer.spark.driver import main as serve

    install_kill_switch(int(argv[0]))
    if argv[1:] == ["no-etags"]:
        strip_identities_before_job_commit()
    return serve(["--serve"])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--engine"]:
        return engine(argv[1:])
    dest, rows, partitions, kill_after = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    from pyspark.sql import SparkSession

    import committer.spark
    from committer.testing.engine_python import engine_python

    work = Path(tempfile.mkdtemp(prefix="crash-engine-"))
    python = engine_python(work, "tests.spark.crash_driver", "--engine", str(kill_after),
                           *argv[4:5])
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("manifest-committer-crash-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
    )
    builder = committer.spark.configure(builder).config(committer.spark.PYTHON_KEY, str(python))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(READY, flush=True)
    spark.range(0, rows, numPartitions=2) \
        .selectExpr("id", f"cast(id % {partitions} as int) as p") \
        .write.partitionBy("p").parquet(dest)
    spark.stop()
    print("crash-driver: the job committed; the kill switch never fired", flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
