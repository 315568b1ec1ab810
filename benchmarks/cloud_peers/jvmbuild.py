"""The JVM side of the Hadoop rows: its jar, compiled here on first use with the JDK's javac
against pyspark's jars (Hadoop's and Spark's APIs come with them) from ``jvm/src/`` into
``jvm/build/`` (git-ignored), named by a hash of the sources and of the jars compiled
against; never committed. The connectors and spark-hadoop-cloud are not needed to compile
(the driver names the protocol class and the connectors by their keys); they are put on the
class path when it runs (``connectors.py``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from committer.spark.build import spark_jars_dir
from committer.spark.jarbuild import JavacError, find_javac, find_jdk_tool, javac_jar, locked

__all__ = ["HadoopPeerError", "find_java", "jar_path"]

JVM_ROOT = Path(__file__).resolve().parent / "jvm"
SOURCE_ROOT = JVM_ROOT / "src"
BUILD_DIR = JVM_ROOT / "build"
JAVA_RELEASE = "17"


class HadoopPeerError(RuntimeError):
    """The Hadoop rows could not run (no JDK, the build failed, the JVM failed)."""


def find_java() -> str | None:
    """``java`` from ``JAVA_HOME``, else on ``PATH``."""
    return find_jdk_tool("java")


def _sources() -> list[Path]:
    files = sorted(SOURCE_ROOT.rglob("*.java"))
    if not files:
        raise HadoopPeerError(f"no Java sources under {SOURCE_ROOT}")
    return files


def _build_key(jars: Path) -> str:
    """The sources, and the Hadoop they are compiled against, name the build."""
    digest = hashlib.sha256(JAVA_RELEASE.encode())
    for path in _sources():
        digest.update(path.relative_to(SOURCE_ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for jar in sorted(p.name for p in jars.glob("hadoop-client-*.jar")):
        digest.update(jar.encode() + b"\0")
    return digest.hexdigest()[:16]


def jar_path() -> Path:
    """The Hadoop rows' jar, compiled now if this build of the sources has none yet."""
    jars = spark_jars_dir()
    target = BUILD_DIR / f"cloud-peers-{_build_key(jars)}.jar"
    if target.is_file():
        return target
    javac = find_javac()
    if javac is None:
        raise HadoopPeerError("the Hadoop rows compile their Java driver: a JDK 17+ (javac on "
                              "PATH or in JAVA_HOME) is needed")
    with locked(BUILD_DIR):
        if target.is_file():
            return target
        try:
            javac_jar(javac, _sources(), [jars], JAVA_RELEASE, target, what="the Hadoop rows")
        except JavacError as e:
            raise HadoopPeerError(str(e)) from None
        for old in BUILD_DIR.glob("cloud-peers-*.jar"):
            if old != target:
                old.unlink(missing_ok=True)
    return target
