"""Compile the JVM shim from its Java sources against the installed pyspark's jars.

The jar is never shipped or committed: it is built on first use into a cache directory keyed by
a hash of the sources, the Spark version and the Java release, so a changed source or an
upgraded pyspark gets a fresh build and an unchanged one is reused.

    python -m committer.spark.build [--output DIR] [--force]

builds (if needed) and prints the jar's path; with ``--output`` the jar is written to ``DIR``
(for a user whose driver has only a JRE: build on a machine with a JDK, copy the jar, and point
``SPARK_MANIFEST_COMMITTER_JAR`` at it).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from committer.spark.errors import JarUnavailableError

__all__ = [
    "JAR_NAME",
    "JarUnavailableError",
    "build_jar",
    "cache_root",
    "find_javac",
    "jar_path",
    "main",
    "source_files",
    "spark_jars_dir",
]

JAR_NAME = "committer-shim.jar"
JAVA_RELEASE = "17"
# A prebuilt jar to use as is (JRE-only drivers); skips building entirely.
ENV_JAR = "SPARK_MANIFEST_COMMITTER_JAR"
# Where built jars are cached (default: $XDG_CACHE_HOME or ~/.cache, /spark-manifest-committer).
ENV_CACHE = "SPARK_MANIFEST_COMMITTER_CACHE"
SOURCE_ROOT = Path(__file__).resolve().parent / "jvm" / "src"


def source_files() -> list[Path]:
    """The shim's Java sources, in a stable order."""
    files = sorted(SOURCE_ROOT.rglob("*.java"))
    if not files:
        raise JarUnavailableError(f"no Java sources found under {SOURCE_ROOT}")
    return files


def spark_jars_dir() -> Path:
    """The jars of the installed pyspark, which the shim is compiled against and runs with."""
    try:
        import pyspark
    except ImportError as exc:
        raise JarUnavailableError(
            "pyspark is not installed; install spark-manifest-committer[spark]"
        ) from exc
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        raise JarUnavailableError(f"pyspark has no jars directory at {jars}")
    return jars


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def cache_root() -> Path:
    override = os.environ.get(ENV_CACHE)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-manifest-committer"


def build_key() -> str:
    """Hash of everything the compiled jar depends on."""
    digest = hashlib.sha256()
    digest.update(f"spark={spark_version()}\0release={JAVA_RELEASE}\0".encode())
    for path in source_files():
        digest.update(path.relative_to(SOURCE_ROOT).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def find_javac() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / ("javac.exe" if os.name == "nt" else "javac")
        if candidate.is_file():
            return str(candidate)
    return shutil.which("javac")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialises builds into one cache directory (parallel test workers, several sessions)."""
    directory.mkdir(parents=True, exist_ok=True)
    lock_path = directory / ".lock"
    with lock_path.open("a+") as handle:
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


def _compile(javac: str, target: Path) -> None:
    classpath = str(spark_jars_dir() / "*")
    with tempfile.TemporaryDirectory(prefix="manifest-committer-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        # An argument file keeps long source lists and classpaths off the command line.
        argfile = Path(tmp) / "sources.txt"
        argfile.write_text(
            "\n".join(f'"{p.as_posix()}"' for p in source_files()) + "\n", encoding="utf-8"
        )
        cmd = [
            javac,
            "--release",
            JAVA_RELEASE,
            "-encoding",
            "UTF-8",
            "-Xlint:all,-path,-serial,-processing",
            "-cp",
            classpath,
            "-d",
            str(classes),
            f"@{argfile}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise JarUnavailableError(
                f"javac failed (exit {proc.returncode}) building the shim:\n"
                f"{proc.stdout}{proc.stderr}"
            )
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as jar:
            jar.writestr(
                "META-INF/MANIFEST.MF",
                "Manifest-Version: 1.0\r\n"
                f"Created-By: spark-manifest-committer (javac --release {JAVA_RELEASE})\r\n"
                f"Spark-Version: {spark_version()}\r\n\r\n",
            )
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        # Readers either see no jar or a complete one.
        os.replace(partial, target)


def build_jar(output_dir: Path | None = None, force: bool = False) -> Path:
    """Builds the jar unless an identical build is cached; returns its path."""
    javac = find_javac()
    directory = output_dir if output_dir is not None else cache_root() / build_key()
    target = directory / JAR_NAME
    if target.is_file() and not force and output_dir is None:
        return target
    if javac is None:
        raise JarUnavailableError(
            "the spark-manifest-committer JVM shim must be compiled, but no JDK (javac) was "
            "found (set JAVA_HOME or put javac on PATH). With only a JRE here, run "
            "`python -m committer.spark.build --output DIR` on a machine with a JDK and the "
            f"same pyspark version, copy DIR/{JAR_NAME} here and set {ENV_JAR} to its path."
        )
    with _locked(directory):
        if force or output_dir is not None or not target.is_file():
            _compile(javac, target)
    return target


def jar_path() -> Path:
    """The shim jar: ``$SPARK_MANIFEST_COMMITTER_JAR`` if set, else built on demand and cached."""
    prebuilt = os.environ.get(ENV_JAR)
    if prebuilt:
        path = Path(prebuilt)
        if not path.is_file():
            raise JarUnavailableError(f"{ENV_JAR}={prebuilt} does not name a file")
        return path
    return build_jar()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m committer.spark.build",
        description="Build the spark-manifest-committer JVM shim jar and print its path.",
    )
    parser.add_argument("--output", type=Path, help=f"write {JAR_NAME} into this directory")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    try:
        path = build_jar(args.output, force=args.force)
    except JarUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
