"""Compiling the JVM shim: one jar per Spark line, at wheel build time or on first use.

Standard library only: ``setup.py`` loads this file by path while building the wheel, when
neither this package nor its dependencies can be imported. :mod:`committer.spark.build` uses it
at run time.

A Spark *line* is a range of pyspark versions one compiled jar serves (Spark keeps binary
compatibility within it): ``3.5`` (Scala 2.12) and ``4`` (every 4.x, Scala 2.13). Each line's
jar is compiled against the line's first release, so it uses nothing a later release of the line
added. At wheel build time that release's jars come from the package registry through pip
(``pip download pyspark==X``), unpacked into a cache; at run time a jar is compiled against the
installed pyspark.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

JVM_ROOT = Path(__file__).resolve().parent / "jvm"
SOURCE_ROOT = JVM_ROOT / "src"
PREBUILT_DIR = "jars"
INDEX_NAME = "index.json"
# The Spark and library jars the shim's sources reference (directly or through a supertype).
COMPILE_JAR_PREFIXES = (
    "spark-core_", "spark-sql_", "spark-sql-api_", "spark-catalyst_", "spark-common-utils",
    "scala-library-", "hadoop-client-api-", "jackson-core-", "jackson-databind-",
    "jackson-annotations-", "slf4j-api-",
)
# Where built jars and downloaded compile classpaths are cached.
ENV_CACHE = "SPARK_MANIFEST_COMMITTER_CACHE"


class JavacError(RuntimeError):
    """A jar could not be compiled (no JDK, javac failed, compile classpath unavailable).

    Not in committer.errors: this module must import without the package (see module doc);
    :mod:`committer.spark.build` turns it into ``JarUnavailableError``.
    """


@dataclass(frozen=True)
class SparkLine:
    """A range of pyspark versions served by one compiled jar."""

    name: str  # version prefix: "3.5" matches 3.5.*, "4" matches 4.*
    scala: str
    java_release: str
    compile_against: str  # the pyspark release whose jars the prebuilt jar is compiled against

    @property
    def jar_name(self) -> str:
        return f"committer-shim-spark{self.name}_{self.scala}.jar"

    def matches(self, version: str) -> bool:
        wanted = self.name.split(".")
        return version.split(".")[: len(wanted)] == wanted


def spark_lines() -> list[SparkLine]:
    """The supported lines, from ``jvm/spark-lines.json`` (shared by setup.py and run time)."""
    entries = json.loads((JVM_ROOT / "spark-lines.json").read_text(encoding="utf-8"))
    return [SparkLine(**entry) for entry in entries]


def line_for(version: str) -> SparkLine | None:
    return next((line for line in spark_lines() if line.matches(version)), None)


def source_files() -> list[Path]:
    """The shim's Java sources, in a stable order."""
    files = sorted(SOURCE_ROOT.rglob("*.java"))
    if not files:
        raise JavacError(f"no Java sources found under {SOURCE_ROOT}")
    return files


def sources_digest() -> str:
    """Hash of the Java sources: a prebuilt jar is used only by the sources it was built from."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.relative_to(SOURCE_ROOT).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def cache_root() -> Path:
    override = os.environ.get(ENV_CACHE)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-manifest-committer"


def find_jdk_tool(name: str) -> str | None:
    """The JDK's ``name`` (``javac``, ``java``) from ``JAVA_HOME``, else on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / (f"{name}.exe" if os.name == "nt" else name)
        if candidate.is_file():
            return str(candidate)
    return shutil.which(name)


def find_javac() -> str | None:
    return find_jdk_tool("javac")


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Serialises builds into one directory (parallel test workers, several sessions)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("a+") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX: the atomic rename still protects
            yield
            return
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def compile_jar(javac: str, classpath: Sequence[Path], java_release: str, spark_version: str,
                target: Path) -> None:
    """Compiles the sources against ``classpath`` (directories of jars) into ``target``."""
    javac_jar(javac, source_files(), classpath, java_release, target,
              what=f"the shim against Spark {spark_version}",
              manifest=(f"Created-By: spark-manifest-committer (javac --release {java_release})",
                        f"Spark-Version: {spark_version}"))


def javac_jar(javac: str, sources: Sequence[Path], classpath: Sequence[Path], java_release: str,
              target: Path, *, what: str, manifest: Sequence[str] = ()) -> None:
    """Compiles ``sources`` against ``classpath`` (directories of jars) into the jar ``target``
    (``manifest``: its extra lines), which readers see whole or not at all; ``what`` names the
    build in a ``JavacError``."""
    with tempfile.TemporaryDirectory(prefix="manifest-committer-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        # An argument file keeps long source lists and classpaths off the command line.
        argfile = Path(tmp) / "sources.txt"
        argfile.write_text(
            "\n".join(f'"{p.as_posix()}"' for p in sources) + "\n", encoding="utf-8"
        )
        cmd = [
            javac, "--release", java_release, "-encoding", "UTF-8",
            "-Xlint:all,-path,-serial,-processing",
            "-cp", os.pathsep.join(str(d / "*") for d in classpath),
            "-d", str(classes), f"@{argfile}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise JavacError(
                f"javac failed (exit {proc.returncode}) building {what}:\n"
                f"{proc.stdout}{proc.stderr}"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF",
                         "".join(f"{line}\r\n" for line in ["Manifest-Version: 1.0", *manifest])
                         + "\r\n")
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        # Readers either see no jar or a complete one.
        os.replace(partial, target)


def _wanted(name: str) -> bool:
    return name.endswith(".jar") and name.startswith(COMPILE_JAR_PREFIXES)


def _unpack_jars(archive: Path, dest: Path) -> int:
    """Copies the compile jars out of a pyspark sdist (``deps/jars/``) or wheel (``jars/``)."""
    count = 0
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as whl:
            for info in whl.infolist():
                parts = info.filename.split("/")
                if len(parts) == 3 and parts[:2] == ["pyspark", "jars"] and _wanted(parts[2]):
                    (dest / parts[2]).write_bytes(whl.read(info))
                    count += 1
        return count
    with tarfile.open(archive, "r:*") as sdist:
        for member in sdist:
            parts = member.name.split("/")
            if (member.isfile() and len(parts) == 4 and parts[1:3] == ["deps", "jars"]
                    and _wanted(parts[3])):
                source = sdist.extractfile(member)
                if source is not None:
                    with source, (dest / parts[3]).open("wb") as out:
                        shutil.copyfileobj(source, out)
                    count += 1
    return count


def downloaded_classpath(version: str, cache: Path) -> Path:
    """The compile jars of pyspark ``version``, fetched once through pip into ``cache``."""
    dest = cache / f"pyspark-{version}"
    done = dest / ".complete"
    if done.is_file():
        return dest
    with locked(cache):
        if done.is_file():
            return dest
        with tempfile.TemporaryDirectory(prefix="manifest-committer-pyspark-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                   "--dest", tmp, f"pyspark=={version}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            archives = [p for p in Path(tmp).iterdir() if p.name.startswith("pyspark")]
            if proc.returncode != 0 or len(archives) != 1:
                raise JavacError(
                    f"could not fetch pyspark {version} to compile the shim against "
                    f"({' '.join(cmd)} exited {proc.returncode}):\n{proc.stderr[-3000:]}"
                )
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            if _unpack_jars(archives[0], dest) == 0:
                raise JavacError(f"{archives[0].name} holds none of the jars the shim needs")
        done.write_text(version, encoding="utf-8")
    return dest


def build_prebuilt(output: Path, cache: Path | None = None) -> list[Path]:
    """Compiles one jar per Spark line into ``output`` with an index; returns the jars.

    Run when the wheel is built. The index records the sources' hash, so a jar left beside
    edited sources (an editable install) is not used for them.
    """
    javac = find_javac()
    if javac is None:
        raise JavacError(
            "building spark-manifest-committer compiles its JVM shim for each Spark line: a "
            "JDK 17+ (javac on PATH or in JAVA_HOME) is needed at build time"
        )
    cache = cache if cache is not None else cache_root() / "build"
    output.mkdir(parents=True, exist_ok=True)
    entries = []
    jars = []
    for line in spark_lines():
        classpath = downloaded_classpath(line.compile_against, cache)
        target = output / line.jar_name
        compile_jar(javac, [classpath], line.java_release, line.compile_against, target)
        jars.append(target)
        entries.append({"jar": line.jar_name, "line": line.name, "scala": line.scala,
                        "java_release": line.java_release,
                        "compiled_against": line.compile_against})
    index = {"sources": sources_digest(), "jars": entries}
    (output / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return jars
