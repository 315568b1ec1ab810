"""The JVM shim jar for the installed pyspark: prebuilt in the wheel, built in place in a
checkout, else compiled from source on first use.

The wheel carries one jar per Spark line (``committer/spark/jars/``, compiled when the wheel is
built, see :mod:`committer.spark.jarbuild`); :func:`jar_path` picks the one matching the
installed pyspark and its Scala version, so a driver needs only a JRE. A checkout (an editable
install) carries none: ``make setup`` compiles the sources against the pyspark it installed,
into the checkout (``committer/spark/jars/in-place/<key>/``). Otherwise (a Spark no jar serves,
sources edited since) the sources are compiled against the installed pyspark's jars on first
use, into a cache directory. In place and in the cache, a build's directory is named by a hash
of the sources, the Spark version, its Scala version and the Java release, so two environments
sharing one checkout (``.venv`` on Spark 4, ``.venv-spark35``) each find only their own jar.
No jar is ever committed to git.

    python -m committer.spark.build [--output DIR | --in-place] [--force]

prints the jar's path; with ``--output`` the jar is copied (or built) into ``DIR`` (to copy to
a cluster, or to a driver of another machine: point ``SPARK_MANIFEST_COMMITTER_JAR`` at it);
``--in-place`` builds it into the checkout (what ``make setup`` runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path

from committer.spark import jarbuild
from committer.spark.errors import JarUnavailableError
from committer.spark.jarbuild import cache_root, find_javac, source_files

__all__ = [
    "ENV_CACHE",
    "ENV_JAR",
    "JAR_NAME",
    "JarUnavailableError",
    "build_jar",
    "cache_root",
    "find_javac",
    "in_place_jar",
    "jar_path",
    "main",
    "prebuilt_jar",
    "scala_version",
    "source_files",
    "spark_jars_dir",
    "spark_version",
]

JAR_NAME = "committer-shim.jar"
# The Java release of a source build for a Spark no line in spark-lines.json names.
DEFAULT_JAVA_RELEASE = "17"
# A prebuilt jar to use as is; skips the lookup and any build.
ENV_JAR = "SPARK_MANIFEST_COMMITTER_JAR"
ENV_CACHE = jarbuild.ENV_CACHE
PREBUILT_ROOT = Path(__file__).resolve().parent / jarbuild.PREBUILT_DIR
# Where `make setup` builds the jar for the installed pyspark in a checkout (ignored by git).
IN_PLACE_ROOT = PREBUILT_ROOT / "in-place"

LOG = logging.getLogger("committer.spark.build")


def spark_jars_dir() -> Path:
    """The jars the driver's JVM will run: ``$SPARK_HOME/jars`` if set (pyspark's rule), else
    the installed pyspark's own."""
    try:
        import pyspark
    except ImportError as exc:
        raise JarUnavailableError(
            "pyspark is not installed; install spark-manifest-committer[spark]"
        ) from exc
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).resolve().parent)
    jars = Path(home) / "jars"
    if not jars.is_dir():
        raise JarUnavailableError(f"Spark has no jars directory at {jars}")
    return jars


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def scala_version(jars: Path) -> str | None:
    """The Scala binary version (``2.12``, ``2.13``) of the Spark whose jars are in ``jars``."""
    for jar in jars.glob("scala-library-*.jar"):
        found = re.fullmatch(r"scala-library-(\d+\.\d+)\..*\.jar", jar.name)
        if found:
            return found.group(1)
    return None


def prebuilt_jar(version: str, scala: str | None, root: Path | None = None) -> Path | None:
    """The packaged jar for Spark ``version`` on Scala ``scala``, if this package carries one
    built from the sources it holds."""
    root = root if root is not None else PREBUILT_ROOT
    index_file = root / jarbuild.INDEX_NAME
    if not index_file.is_file():
        return None
    index = json.loads(index_file.read_text(encoding="utf-8"))
    if index.get("sources") != jarbuild.sources_digest():
        return None  # the sources were edited after the jars were built (a checkout)
    for entry in index.get("jars", []):
        line = jarbuild.SparkLine(entry["line"], entry["scala"], entry["java_release"],
                                  entry["compiled_against"])
        if line.matches(version) and scala in (None, line.scala):
            jar = root / line.jar_name
            if jar.is_file():
                return jar
    return None


def _carried() -> str:
    index_file = PREBUILT_ROOT / jarbuild.INDEX_NAME
    if not index_file.is_file():
        carried = "this installation carries no prebuilt jar"
    else:
        entries = json.loads(index_file.read_text(encoding="utf-8")).get("jars", [])
        lines = ", ".join(f"Spark {e['line']}.x (Scala {e['scala']})" for e in entries)
        carried = f"the prebuilt jars ({lines}) serve neither this Spark nor these sources"
    if IN_PLACE_ROOT.is_dir():  # a checkout `make setup` built a jar in, for another Spark
        carried += (", nor do the jars built in this checkout (for other Spark versions or "
                    "sources: `make setup` builds one for the installed pyspark)")
    return carried


def build_key(version: str, scala: str | None, release: str) -> str:
    """Hash of everything a source-built jar depends on."""
    digest = hashlib.sha256()
    digest.update(f"spark={version}\0scala={scala}\0release={release}\0".encode())
    digest.update(jarbuild.sources_digest().encode())
    return digest.hexdigest()[:20]


def _java_release(version: str) -> str:
    line = jarbuild.line_for(version)
    return line.java_release if line is not None else DEFAULT_JAVA_RELEASE


def in_place_jar(version: str, scala: str | None, root: Path | None = None) -> Path | None:
    """The jar built in this checkout (``--in-place``) from these sources against Spark
    ``version`` on Scala ``scala``, if there is one: never a jar built for another Spark."""
    root = root if root is not None else IN_PLACE_ROOT
    jar = root / build_key(version, scala, _java_release(version)) / JAR_NAME
    return jar if jar.is_file() else None


def build_jar(output_dir: Path | None = None, force: bool = False, in_place: bool = False) -> Path:
    """Compiles the jar against the installed Spark unless an identical build is there already:
    into ``output_dir`` (always compiled), into this checkout (``in_place``) or into the cache."""
    version = spark_version()
    release = _java_release(version)
    if output_dir is not None:
        directory = output_dir
    else:
        root = IN_PLACE_ROOT if in_place else cache_root()
        directory = root / build_key(version, scala_version(spark_jars_dir()), release)
    target = directory / JAR_NAME
    if target.is_file() and not force and output_dir is None:
        return target
    javac = find_javac()
    if javac is None:
        raise JarUnavailableError(
            f"no jar of the spark-manifest-committer JVM shim fits pyspark {version}: "
            f"{_carried()}, and compiling it needs a JDK (javac), which is not here (set "
            "JAVA_HOME or put javac on PATH). With only a JRE here, run "
            "`python -m committer.spark.build --output DIR` on a machine with a JDK and the "
            f"same pyspark version, copy DIR/{JAR_NAME} here and set {ENV_JAR} to its path."
        )
    jars = spark_jars_dir()
    try:
        with jarbuild.locked(directory):
            if force or output_dir is not None or not target.is_file():
                LOG.info("compiling the shim against pyspark %s (%s) into %s", version, jars,
                         target)
                jarbuild.compile_jar(javac, [jars], release, version, target)
    except jarbuild.JavacError as exc:
        raise JarUnavailableError(str(exc)) from exc
    return target


def jar_path() -> Path:
    """The shim jar: ``$SPARK_MANIFEST_COMMITTER_JAR`` if set, else the packaged jar for the
    installed Spark's line, else the one built in this checkout for the installed Spark, else
    one built from source on demand (cached)."""
    prebuilt = os.environ.get(ENV_JAR)
    if prebuilt:
        path = Path(prebuilt)
        if not path.is_file():
            raise JarUnavailableError(f"{ENV_JAR}={prebuilt} does not name a file")
        return path
    version = spark_version()
    scala = scala_version(spark_jars_dir())
    found = prebuilt_jar(version, scala) or in_place_jar(version, scala)
    return found if found is not None else build_jar()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m committer.spark.build",
        description="Print the path of the spark-manifest-committer JVM shim jar for the "
        "installed pyspark (building it if no prebuilt jar fits).",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--output", type=Path, help=f"copy or build {JAR_NAME} into this directory")
    where.add_argument("--in-place", action="store_true",
                       help="build it into this checkout for the installed pyspark, unless "
                       "there already (what `make setup` runs)")
    parser.add_argument("--force", action="store_true", help="compile from source, even if cached")
    args = parser.parse_args(argv)
    try:
        if args.in_place:
            path = build_jar(force=args.force, in_place=True)
        elif args.force:
            path = build_jar(args.output, force=True)
        elif args.output is not None:
            path = args.output / JAR_NAME
            args.output.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(jar_path(), path)
        else:
            path = jar_path()
    except JarUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
