"""Spark integration: write through the manifest committer from PySpark.

    from pyspark.sql import SparkSession
    import committer.spark

    spark = committer.spark.configure(SparkSession.builder, io_threads=64).getOrCreate()

:func:`configure` adds the shim jar (built from source on first use, see
:mod:`committer.spark.build`), selects the commit protocol, sets committer options, and points
the job engine (a Python child process of the driver's JVM, ``committer.spark.driver``) at this
interpreter and this package. :func:`spark_conf` gives the same settings as ``--conf`` entries,
for drivers that are not PySpark processes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TypeVar

from committer.config import KEYS, SPARK_HADOOP_PREFIX
from committer.errors import ConfigError
from committer.spark.errors import JarUnavailableError

__all__ = [
    "PROTOCOL_CLASS",
    "PYTHONPATH_KEY",
    "PYTHON_KEY",
    "JarUnavailableError",
    "configure",
    "jar_path",
    "spark_conf",
]

PROTOCOL_CLASS = "manifestcommitter.spark.ManifestCommitProtocol"
PYTHON_KEY = "spark.manifest.committer.python"
PYTHONPATH_KEY = "spark.manifest.committer.pythonpath"

_ATTR_TO_KEY = {k.attr: k.name for k in KEYS}
B = TypeVar("B")


def jar_path() -> Path:
    """The shim jar, built from the package's Java sources against the installed pyspark."""
    from committer.spark.build import jar_path as _jar_path

    return _jar_path()


def _option_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def spark_conf(**options: Any) -> dict[str, str]:
    """The Spark configuration entries for the committer (for ``--conf`` or spark-defaults).

    ``options`` are :class:`committer.config.CommitterConfig` field names (``io_threads=64``,
    ``validate_output=True``...), set as ``spark.hadoop.<hadoop key>``.
    """
    conf = {
        "spark.sql.sources.commitProtocolClass": PROTOCOL_CLASS,
        # The engine runs this very interpreter and can import this very package even when it
        # is not installed (a source checkout).
        PYTHON_KEY: sys.executable,
        PYTHONPATH_KEY: str(Path(__file__).resolve().parents[2]),
    }
    for name, value in options.items():
        key = _ATTR_TO_KEY.get(name)
        if key is None:
            raise ConfigError(
                f"unknown committer option {name!r}; known: {', '.join(sorted(_ATTR_TO_KEY))}"
            )
        conf[SPARK_HADOOP_PREFIX + key] = _option_value(value)
    return conf


def _append_path(existing: str | None, entry: str, separator: str) -> str:
    if not existing:
        return entry
    parts = existing.split(separator)
    return existing if entry in parts else f"{existing}{separator}{entry}"


def configure(builder: B, **options: Any) -> B:
    """Returns ``builder`` set up to write through the manifest committer.

    Adds the jar to ``spark.jars`` (executors) and ``spark.driver.extraClassPath`` (Spark checks
    that the protocol class loads when the option is set, so it must be there from the start),
    and sets the protocol class, the engine's interpreter and ``options``.
    """
    jar = str(jar_path())
    existing: dict[str, Any] = dict(getattr(builder, "_options", {}) or {})
    b: Any = builder
    b = b.config("spark.jars", _append_path(existing.get("spark.jars"), jar, ","))
    b = b.config(
        "spark.driver.extraClassPath",
        _append_path(existing.get("spark.driver.extraClassPath"), jar, os.pathsep),
    )
    for key, value in spark_conf(**options).items():
        b = b.config(key, value)
    return builder
