"""``committer.spark.configure`` / ``spark_conf``: what a builder gets, without starting Spark."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import committer.spark
from committer.errors import ConfigError

pytestmark = pytest.mark.spark


class FakeBuilder:
    """Records ``config`` calls like ``SparkSession.Builder`` does (same ``_options`` dict)."""

    def __init__(self, **options: str) -> None:
        self._options: dict[str, str] = dict(options)
        self.created = 0

    def config(self, key: str, value: str) -> FakeBuilder:
        self._options[key] = value
        return self

    def getOrCreate(self) -> str:
        self.created += 1
        return "session"


def test_spark_conf_maps_options_to_hadoop_keys() -> None:
    conf = committer.spark.spark_conf(io_threads=7, validate_output=True)
    assert conf["spark.sql.sources.commitProtocolClass"] == committer.spark.PROTOCOL_CLASS
    assert conf["spark.hadoop.mapreduce.manifest.committer.io.threads"] == "7"
    assert conf["spark.hadoop.mapreduce.manifest.committer.validate.output"] == "true"
    # The engine process runs this interpreter, importing this package.
    assert conf[committer.spark.PYTHON_KEY] == sys.executable
    assert (Path(conf[committer.spark.PYTHONPATH_KEY]) / "committer" / "spark").is_dir()


def test_unknown_option_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown committer option 'io_thread'"):
        committer.spark.spark_conf(io_thread=7)


def test_configure_appends_jar_and_keeps_existing_classpath() -> None:
    builder = FakeBuilder(**{
        "spark.jars": "/opt/a.jar",
        "spark.driver.extraClassPath": "/opt/b.jar",
    })
    out: Any = committer.spark.configure(builder, io_threads=3)
    assert out is builder
    jar = str(committer.spark.jar_path())
    assert builder._options["spark.jars"] == f"/opt/a.jar,{jar}"
    assert builder._options["spark.driver.extraClassPath"] == f"/opt/b.jar{os.pathsep}{jar}"
    assert builder._options["spark.hadoop.mapreduce.manifest.committer.io.threads"] == "3"
    # getOrCreate is the builder's own: nothing is registered with the session.
    assert out.getOrCreate() == "session"
    assert builder.created == 1
