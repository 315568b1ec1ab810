"""hdfs:// on a real HDFS: a MiniDFSCluster (hadoop-client-minicluster, the line's Hadoop) the
suite starts once on 127.0.0.1. The committer is set cluster-wide (the session's protocol),
so Spark sends it writes to HDFS, which the Python engine does not open: the shim commits them
in the JVM with Spark's protocol and the committer Hadoop's factory names (Hadoop's
ManifestCommitter on Spark 4's Hadoop 3.5; Spark's usual FileOutputCommitter on Spark 3.5's
Hadoop 3.3.4, and for every dynamic partition overwrite), the engine never asked, and the
driver's log line names it (docs/spark.md, "Destinations the engine does not open")."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from committer.spark import build
from committer.spark.jarbuild import find_jdk_tool
from committer.testing import jvm_artifacts
from committer.testing.emulators import stop_process
from tests.spark.helpers import intercepting_engine, rows, session_conf, wait_until_no_task_runs

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(build.find_javac() is None,
                                 reason="the HDFS launcher is compiled here: needs a JDK")]

SOURCE = Path(__file__).resolve().parent / "jvm" / "manifestcommitter" / "testhdfs" / \
    "MiniHdfs.java"
MANIFEST_COMMITTER = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter"
PROTOCOL_LOGGER = "manifestcommitter.spark.ManifestCommitProtocol"
#: a MiniDFSCluster's start on a busy two-core machine took up to 150 s here
READY_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def hdfs(spark: Any) -> Iterator[str]:
    """``hdfs://127.0.0.1:<port>``: one NameNode and one DataNode for the module."""
    import pyspark

    try:
        line = jvm_artifacts.line_of(pyspark.__version__)
        minicluster = jvm_artifacts.fetch_all(line, [jvm_artifacts.MINICLUSTER])
    except jvm_artifacts.ArtifactError as e:
        pytest.fail(f"hadoop-client-minicluster could not be had: {e}")
    work = Path(tempfile.mkdtemp(prefix="mini-hdfs-"))
    jars = f"{build.spark_jars_dir()}/*"
    classpath = os.pathsep.join([str(minicluster[jvm_artifacts.MINICLUSTER]), jars])
    javac, java = build.find_javac(), find_jdk_tool("java")
    assert javac is not None and java is not None
    subprocess.run([javac, "-nowarn", "-cp", classpath, "-d", str(work / "classes"),
                    str(SOURCE)], check=True, capture_output=True)
    log = open(work / "minihdfs.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([java, "-Xmx512m", "-cp", os.pathsep.join([str(work / "classes"),
                                                                         classpath]),
                             "manifestcommitter.testhdfs.MiniHdfs", str(work / "data")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    try:
        uri = _ready(proc, work / "minihdfs.log")
        yield uri
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the launcher shuts the cluster down
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            stop_process(proc)
        log.close()


def _ready(proc: subprocess.Popen[bytes], log: Path) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    line = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or (proc.poll() is not None and not sel.select(0)):
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"MiniDFSCluster did not start (exit {proc.returncode}):\n{tail}")
            if sel.select(min(left, 1.0)):
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    continue
                line += chunk
    text = line.decode().strip()
    assert text.startswith("READY hdfs://"), text
    return text.split(" ", 1)[1]


def _has_manifest_committer(spark: Any) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(MANIFEST_COMMITTER)
    except Exception:  # Py4J wraps the ClassNotFoundException
        return False
    return True


def _read(spark: Any, uri: str) -> bytes:
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    path = jvm.org.apache.hadoop.fs.Path(uri)
    stream = path.getFileSystem(conf).open(path)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def _committed_by(spark: Any, dest: str, manifest: bool) -> None:
    success = _read(spark, f"{dest}/_SUCCESS")
    if manifest:
        doc = json.loads(success)
        assert doc["committer"] == MANIFEST_COMMITTER and doc["success"] is True, doc
    else:
        assert success == b"", "FileOutputCommitter writes an empty _SUCCESS"


@contextlib.contextmanager
def protocol_log(spark: Any, path: Path) -> Iterator[None]:
    """The shim's driver-side log lines (INFO and above) copied into ``path`` for the block."""
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    level = log4j.Level.INFO
    context = log4j.LogManager.getContext(False)
    layout = log4j.core.layout.PatternLayout.newBuilder().withPattern("%p %c: %m%n").build()
    appender = log4j.core.appender.FileAppender.newBuilder().withFileName(str(path)) \
        .setName("hdfs-test-protocol-log").setLayout(layout).build()
    appender.start()
    log4j.core.config.Configurator.setLevel(PROTOCOL_LOGGER, level)
    config = context.getConfiguration()
    logger = config.getLoggerConfig(PROTOCOL_LOGGER)
    logger.addAppender(appender, level, None)
    context.updateLoggers()
    try:
        yield
    finally:
        logger.removeAppender("hdfs-test-protocol-log")
        log4j.core.config.Configurator.setLevel(PROTOCOL_LOGGER, log4j.Level.ERROR)
        context.updateLoggers()
        appender.stop()


def test_hdfs_writes_are_committed_by_hadoop(spark: Any, hdfs: str, tmp_path: Path) -> None:
    manifest = _has_manifest_committer(spark)  # Spark 4's Hadoop 3.5, not 3.5's 3.3.4
    dest = f"{hdfs}/tables/appended"
    log = tmp_path / "protocol.log"
    with intercepting_engine(spark) as engine, protocol_log(spark, log):
        spark.range(0, 30, numPartitions=2).selectExpr("id", "cast(id % 3 as int) as p") \
            .write.partitionBy("p").parquet(dest)
        spark.range(30, 40, numPartitions=2).selectExpr("id", "cast(id % 3 as int) as p") \
            .write.mode("append").partitionBy("p").parquet(dest)
    assert engine.requests == [], "the engine cannot open hdfs://; it must not be asked"
    assert rows(spark, "parquet", dest) == sorted((i, i % 3) for i in range(40))
    _committed_by(spark, dest, manifest)
    named = MANIFEST_COMMITTER + "Factory" if manifest else "FileOutputCommitter"
    lines = [x for x in log.read_text(encoding="utf-8").splitlines()
             if "the Python engine does not open hdfs:// destinations" in x]
    assert len(lines) == 2, log.read_text(encoding="utf-8")
    assert all(named in x for x in lines), lines


def test_hdfs_dynamic_overwrite_and_a_failed_job(spark: Any, hdfs: str) -> None:
    from pyspark.sql.functions import udf

    dest = f"{hdfs}/tables/overwritten"
    spark.range(0, 40, numPartitions=2).selectExpr("id", "cast(id % 4 as int) as p") \
        .write.partitionBy("p").parquet(dest)
    with intercepting_engine(spark) as engine, \
            session_conf(spark, spark__sql__sources__partitionOverwriteMode="dynamic"):
        spark.range(100, 103).selectExpr("id", "1 as p") \
            .write.mode("overwrite").partitionBy("p").parquet(dest)
    assert engine.requests == []
    want = sorted([(i, i % 4) for i in range(40) if i % 4 != 1] + [(i, 1) for i in
                                                                   range(100, 103)])
    assert rows(spark, "parquet", dest) == want
    # Spark's usual committer, whose staging directory Spark's protocol empties into the
    # partitions (its _SUCCESS stays in the staging directory: the table's is the first job's)
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    root = jvm.org.apache.hadoop.fs.Path(dest)
    names = [s.getPath().getName() for s in root.getFileSystem(conf).listStatus(root)]
    assert not [n for n in names if n.startswith(".spark-staging")], names

    @udf("bigint")
    def always_fail(value: int) -> int:
        raise RuntimeError("this job must fail")

    with pytest.raises(Exception, match="this job must fail"):
        spark.range(0, 10, numPartitions=2).select(always_fail("id").alias("id")) \
            .selectExpr("id", "2 as p").write.mode("append").partitionBy("p").parquet(dest)
    wait_until_no_task_runs(spark)
    assert rows(spark, "parquet", dest) == want
