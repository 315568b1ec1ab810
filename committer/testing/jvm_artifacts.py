"""The JVM jars the tests put beside pyspark's own: Hadoop's cloud connectors, a MiniDFSCluster,
Spark's binding for Hadoop's committers. Pinned per Spark line, fetched from Maven Central by
``make test``'s set-up, checked against the SHA-256 pinned here, cached per machine outside
the repository (``~/.cache/spark-manifest-committer/jars/``). No jar is committed.

    python -m committer.testing.jvm_artifacts [--line 3.5|4] [--role ROLE ...] [--check]

fetches what is missing (the line of the installed pyspark unless ``--line`` says) and prints
one path a line; ``--check`` fetches nothing and fails if a jar is missing or altered. A
failure names the artifact and the reason, and the exit status is 1.

Each line's jars match the Hadoop that line's pyspark ships (``pyspark/jars``): pyspark 4.3
ships Hadoop 3.5.0, pyspark 3.5.x Hadoop 3.3.4. What each connector needs at run time beyond
pyspark's jars was checked with ``jdeps --missing-deps`` against them; what it names is listed
beside each pin (optional or unused code paths only).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from committer.spark.jarbuild import cache_root

__all__ = [
    "AZURE",
    "CLOUD_COMMITTER",
    "GCS",
    "LINES",
    "MINICLUSTER",
    "REPOSITORY",
    "Artifact",
    "ArtifactError",
    "cache_dir",
    "fetch",
    "fetch_all",
    "line_of",
    "main",
]

#: Maven Central; ``SPARK_MANIFEST_COMMITTER_MAVEN`` names a mirror of it instead
REPOSITORY = "https://repo1.maven.org/maven2"
ENV_REPOSITORY = "SPARK_MANIFEST_COMMITTER_MAVEN"

# What a jar is for: the tests ask for roles, not names.
AZURE = "azure"  # hadoop-azure: abfs:// (and wasb://)
GCS = "gcs"  # Google's GCS connector, its shaded jar: gs://
MINICLUSTER = "minicluster"  # a real HDFS (MiniDFSCluster) the tests start
CLOUD_COMMITTER = "cloud-committer"  # spark-hadoop-cloud: PathOutputCommitProtocol

_CHUNK = 1 << 20
_TIMEOUT_S = 120.0


class ArtifactError(RuntimeError):
    """A pinned jar could not be had: the message names it and says why."""


@dataclass(frozen=True)
class Artifact:
    """One jar on Maven Central, pinned by its SHA-256."""

    group: str
    name: str
    version: str
    sha256: str
    role: str
    classifier: str | None = None

    @property
    def coordinate(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.name}:{self.version}{tail}"

    @property
    def file_name(self) -> str:
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.name}-{self.version}{tail}.jar"

    @property
    def path(self) -> str:
        """Its path in a Maven repository."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.file_name}"

    def url(self, repository: str = REPOSITORY) -> str:
        return f"{repository.rstrip('/')}/{self.path}"


# Per Spark line (the names of committer/spark/jvm/spark-lines.json).
LINES: dict[str, tuple[Artifact, ...]] = {
    # pyspark 4.3.0: Hadoop 3.5.0, Java 17.
    "4": (
        # jdeps: only org.HdrHistogram (SlidingWindowHdrHistogram, off unless configured) and
        # com.microsoft.azure.storage (wasb://) are missing; ABFS needs nothing more
        Artifact("org.apache.hadoop", "hadoop-azure", "3.5.0",
                 "220b5db238b82437960e4b81c7e3eefa4eff2a03ad502887497f11d0ad86e663", AZURE),
        # the 4.0 line (Java 17); its newest shaded jar Maven Central serves here is 4.0.3;
        # jdeps: every Hadoop class it uses is in hadoop-client-api 3.5.0
        Artifact("com.google.cloud.bigdataoss", "gcs-connector", "4.0.3",
                 "df458ae2de72c9b8a4e7f1256280a5ff73b293af53319c5c6c2e945155358c9e", GCS,
                 classifier="shaded"),
        Artifact("org.apache.hadoop", "hadoop-client-minicluster", "3.5.0",
                 "06772d24529e59939915979b3edba204d367750ef7dc5120411f35221dd4818c",
                 MINICLUSTER),
        # Maven Central has no spark-hadoop-cloud for Spark 4.2 or 4.3 (nor any Spark 4.3
        # artifact): 4.1.2 is the newest of the Scala 2.13 line
        Artifact("org.apache.spark", "spark-hadoop-cloud_2.13", "4.1.2",
                 "672d7d872f434cb7fe1c90f7edcd19b1e8c67a335a578288426fbd4db5096915",
                 CLOUD_COMMITTER),
    ),
    # pyspark 3.5.x: Hadoop 3.3.4, Java 11+ (run here on 17).
    "3.5": (
        Artifact("org.apache.hadoop", "hadoop-azure", "3.3.4",
                 "37adcc23d4db068834acf2b21b6931b609a43cf0a9b4926c440f472af7abad01", AZURE),
        # the connector's Hadoop 3 line (2.2.x): the 3.0 line calls Hadoop 3.3.5's vectored
        # reads (FileRange, VectoredReadUtils), which hadoop-client-api 3.3.4 lacks
        Artifact("com.google.cloud.bigdataoss", "gcs-connector", "hadoop3-2.2.33",
                 "cd47e5ef4d18a97576e0421b74812b87b2cb0d580c59bbc7113f5f526d46e48b", GCS,
                 classifier="shaded"),
        Artifact("org.apache.hadoop", "hadoop-client-minicluster", "3.3.4",
                 "cd8a1703393946c302bb3a52d0fcd23f6f8ded4554bc0dac5d2ee673dbe2b40e",
                 MINICLUSTER),
        Artifact("org.apache.spark", "spark-hadoop-cloud_2.12", "3.5.7",
                 "2b70d491d61c736cd9721e61936e802cb9150048d50eeca3ee1d14fc21011027",
                 CLOUD_COMMITTER),
    ),
}


def line_of(spark_version: str) -> str:
    """The line (a key of :data:`LINES`) of a Spark version: ``3.5.7`` -> ``3.5``."""
    if spark_version.startswith("3.5."):
        return "3.5"
    if spark_version.startswith("4."):
        return "4"
    raise ArtifactError(f"no jars are pinned for Spark {spark_version} (lines: "
                        f"{', '.join(sorted(LINES))})")


def cache_dir() -> Path:
    """Where fetched jars are kept (``SPARK_MANIFEST_COMMITTER_CACHE`` / ``XDG_CACHE_HOME``
    are honoured, as for the shim's jar cache)."""
    return cache_root() / "jars"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def cached(artifact: Artifact, directory: Path | None = None) -> Path | None:
    """The cached jar if it is there and intact."""
    path = (directory or cache_dir()) / artifact.file_name
    if path.is_file() and _sha256(path) == artifact.sha256:
        return path
    return None


def fetch(artifact: Artifact, directory: Path | None = None, *,
          repository: str | None = None, timeout: float = _TIMEOUT_S) -> Path:
    """The jar, from the cache or downloaded into it; :class:`ArtifactError` naming the
    artifact and the reason when it cannot be had or its checksum is not the pinned one."""
    directory = directory or cache_dir()
    found = cached(artifact, directory)
    if found is not None:
        return found
    repository = repository or os.environ.get(ENV_REPOSITORY) or REPOSITORY
    url = artifact.url(repository)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"{artifact.coordinate}: cannot create the cache {directory}: "
                            f"{e}") from None
    # A private temporary name, moved into place once checked: a concurrent fetch of the
    # same jar never sees a partial one.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{artifact.file_name}.", dir=directory)
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    while chunk := response.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            except urllib.error.HTTPError as e:
                raise ArtifactError(f"{artifact.coordinate}: {url} answered HTTP {e.code} "
                                    f"{e.reason}") from None
            except (urllib.error.URLError, OSError, TimeoutError) as e:
                reason = getattr(e, "reason", e)
                raise ArtifactError(f"{artifact.coordinate}: could not download {url}: "
                                    f"{reason}") from None
        got = digest.hexdigest()
        if got != artifact.sha256:
            raise ArtifactError(f"{artifact.coordinate}: the SHA-256 of {url} is {got}, not "
                                f"the pinned {artifact.sha256}; nothing was cached")
        target = directory / artifact.file_name
        os.chmod(tmp, 0o644)  # mkstemp's 0600: the cache is the machine's, readable by all
        os.replace(tmp, target)
        return target
    finally:
        tmp.unlink(missing_ok=True)


def select(line: str, roles: Iterable[str] | None = None) -> list[Artifact]:
    """The pinned artifacts of ``line`` (those of ``roles`` only, when given)."""
    if line not in LINES:
        raise ArtifactError(f"no jars are pinned for Spark line {line!r} (lines: "
                            f"{', '.join(sorted(LINES))})")
    wanted = set(roles) if roles is not None else None
    return [a for a in LINES[line] if wanted is None or a.role in wanted]


def fetch_all(line: str, roles: Iterable[str] | None = None,
              directory: Path | None = None) -> dict[str, Path]:
    """Every jar of ``line`` (of ``roles``), fetched where missing: ``{role: path}``. Each
    jar is tried; the error names every one that failed."""
    out: dict[str, Path] = {}
    failures: list[str] = []
    for artifact in select(line, roles):
        try:
            out[artifact.role] = fetch(artifact, directory)
        except ArtifactError as e:
            failures.append(str(e))
    if failures:
        raise ArtifactError("; ".join(failures))
    return out


def check_all(line: str, roles: Iterable[str] | None = None,
              directory: Path | None = None) -> dict[str, Path]:
    """Every jar of ``line`` (of ``roles``) from the cache, fetching nothing."""
    out: dict[str, Path] = {}
    missing = []
    for artifact in select(line, roles):
        found = cached(artifact, directory)
        if found is None:
            missing.append(artifact.coordinate)
        else:
            out[artifact.role] = found
    if missing:
        raise ArtifactError(f"not in {directory or cache_dir()} (or altered): "
                            f"{', '.join(missing)}; run python -m committer.testing."
                            f"jvm_artifacts --line {line}")
    return out


def _installed_line() -> str:
    try:
        import pyspark
    except ImportError:
        raise ArtifactError("pyspark is not installed: name the line with --line") from None
    return line_of(str(pyspark.__version__))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m committer.testing.jvm_artifacts",
        description="Fetch (or check) the pinned JVM jars the tests need, into the cache.")
    parser.add_argument("--line", choices=sorted(LINES), default=None,
                        help="the Spark line (default: the installed pyspark's)")
    parser.add_argument("--role", action="append", default=None,
                        choices=[AZURE, GCS, MINICLUSTER, CLOUD_COMMITTER],
                        help="only these jars (repeatable; default: all of the line)")
    parser.add_argument("--check", action="store_true",
                        help="fetch nothing; fail if a jar is missing or altered")
    args = parser.parse_args(argv)
    try:
        line = args.line or _installed_line()
        paths = (check_all if args.check else fetch_all)(line, args.role)
    except ArtifactError as e:
        print(f"jvm_artifacts: {e}", file=sys.stderr)
        return 1
    for path in paths.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
