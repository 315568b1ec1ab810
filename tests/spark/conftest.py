"""One local SparkSession for the whole Spark suite, created through ``committer.spark.configure``.

Tests switch between this committer and Spark's default one per write (the protocol class is a
runtime SQL option), so one session serves both sides of every comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark suite needs pyspark installed")

from pyspark.sql import SparkSession  # noqa: E402

import committer.spark  # noqa: E402
from tests.spark.task_driver import COORDINATION  # noqa: E402


@pytest.fixture(scope="session")
def spark_work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A space and a non-ASCII letter in every path the suite writes (HADOOP-17112).
    path = tmp_path_factory.mktemp("spark") / "work dir ü"
    path.mkdir()
    return path


JVM_ONLY_FS = "manifestcommitter.testfs.JvmOnlyFileSystem"
JVM_ONLY_SOURCE = Path(__file__).resolve().parent / "jvm" / "manifestcommitter" / "testfs" / \
    "JvmOnlyFileSystem.java"


def _test_filesystem_classes(out: Path) -> str | None:
    """The test filesystem of scheme ``jvmonly`` (tests/spark/jvm), compiled for the session's
    classpath (the driver's JVM is also the executors' in local mode); None without a JDK,
    and the tests that write through it skip."""
    from committer.spark import build

    javac = build.find_javac()
    if javac is None:
        return None
    subprocess.run([javac, "-nowarn", "-cp", f"{build.spark_jars_dir()}/*", "-d", str(out),
                    str(JVM_ONLY_SOURCE)], check=True, capture_output=True)
    return str(out)


#: Hadoop's cloud connectors for this Spark line (committer/testing/jvm_artifacts.py), on the
#: session's classpath from its start (a JVM adds no jar to its system class loader later);
#: fetched by make test's set-up. When they cannot be had the cloud tests fail, naming why.
CONNECTORS: dict[str, Path] = {}
CONNECTORS_ERROR: list[str] = []


def _connector_jars() -> list[str]:
    from committer.testing import jvm_artifacts

    try:
        line = jvm_artifacts.line_of(pyspark.__version__)
        CONNECTORS.update(jvm_artifacts.fetch_all(line, [jvm_artifacts.AZURE,
                                                         jvm_artifacts.GCS]))
    except jvm_artifacts.ArtifactError as e:
        CONNECTORS_ERROR.append(str(e))
    return [str(p) for p in CONNECTORS.values()]


@pytest.fixture(scope="session")
def spark(spark_work_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # Python workers must run this interpreter (it has the test dependencies).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    test_classes = _test_filesystem_classes(tmp_path_factory.mktemp("test-filesystems"))
    builder = (
        SparkSession.builder.master("local[2, 3]")  # 2 cores; a task may fail 3 times
        .appName("manifest-committer-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.warehouse.dir", str(spark_work_dir / "warehouse"))
        .config("spark.sql.sources.partitionOverwriteMode", "static")
        .config("spark.driver.memory", "1g")
    )
    builder = committer.spark.configure(builder)
    extra = _connector_jars()
    if test_classes is not None:
        extra.append(test_classes)
        builder = builder.config("spark.hadoop.fs.jvmonly.impl", JVM_ONLY_FS)
    if extra:
        classpath = builder._options["spark.driver.extraClassPath"]
        builder = builder.config("spark.driver.extraClassPath",
                                 os.pathsep.join([classpath, *extra]))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def no_coordinator(spark: Any) -> Iterator[None]:
    """Spark's output commit coordinator off, so tests can call ``commitTask`` directly."""
    # SparkContext.conf() is the live SparkConf that SparkEnv (and so the coordinator check) reads.
    conf = spark.sparkContext._jsc.sc().conf()
    before = conf.getOption(COORDINATION)
    conf.set(COORDINATION, "false")
    try:
        yield
    finally:
        if before.isDefined():
            conf.set(COORDINATION, before.get())
        else:
            conf.remove(COORDINATION)
