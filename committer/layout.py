"""Where a job keeps its work: the protocol's directory layout, in one place.

    <dest>/_temporary/manifest_<jobId>/<attempt %02d>/         job attempt directory
        tasks/<taskAttemptId>/...                               task attempt working directories
        manifests/<taskId>-manifest.json                        committed task manifests
        manifests/<taskAttemptId>-manifest.json.tmp             a manifest being saved

Hadoop's own ManifestCommitter names the job directory ``<jobId>`` without the ``manifest_``
prefix; :meth:`JobLayout.find` recognises both when reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from committer.errors import ConfigError
from committer.store.local import local_path
from manifest_schema.uris import is_local

TEMPORARY_DIR = "_temporary"
JOB_DIR_PREFIX = "manifest_"
TASKS_DIR = "tasks"
MANIFESTS_DIR = "manifests"
MANIFEST_SUFFIX = "-manifest.json"
TEMP_MANIFEST_SUFFIX = "-manifest.json.tmp"
SUCCESS_MARKER = "_SUCCESS"

# Ids become path segments: anything that could climb out of, or hide in, a directory is refused.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}$")


def is_valid_id(value: object) -> bool:
    """True if ``value`` is safe as a single path segment."""
    return isinstance(value, str) and _ID.match(value) is not None and ".." not in value


def check_id(kind: str, value: str) -> str:
    """Return ``value`` if it is safe as a single path segment, else raise ``ConfigError``."""
    if not is_valid_id(value):
        raise ConfigError(f"{kind} {value!r} is not a valid id (letters, digits, '_', '.', '-')")
    return value


def join(base: str, *parts: str) -> str:
    """Join path segments onto a location; the location may be a path or a URL."""
    out = base.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


@dataclass(frozen=True)
class JobLayout:
    """Paths of one job attempt under one destination directory."""

    dest: str
    job_id: str
    attempt: int = 0
    hadoop_naming: bool = False  # True: ``_temporary/<jobId>`` as Hadoop's committer writes it

    def __post_init__(self) -> None:
        check_id("job id", self.job_id)
        if not 0 <= self.attempt <= 99:
            raise ConfigError(f"job attempt {self.attempt} is outside 0..99")
        # One spelling per location: a local destination is a plain path (``file:///x`` and
        # ``file:/x`` become ``/x``), as the local store reports its listings.
        dest = local_path(self.dest) if is_local(self.dest) else self.dest
        object.__setattr__(self, "dest", dest.rstrip("/") or "/")

    @property
    def temporary_dir(self) -> str:
        return join(self.dest, TEMPORARY_DIR)

    @property
    def job_dir(self) -> str:
        name = self.job_id if self.hadoop_naming else JOB_DIR_PREFIX + self.job_id
        return join(self.temporary_dir, name)

    @property
    def attempt_dir(self) -> str:
        return join(self.job_dir, f"{self.attempt:02d}")

    @property
    def tasks_dir(self) -> str:
        return join(self.attempt_dir, TASKS_DIR)

    @property
    def manifests_dir(self) -> str:
        return join(self.attempt_dir, MANIFESTS_DIR)

    @property
    def success_marker(self) -> str:
        return join(self.dest, SUCCESS_MARKER)

    def task_attempt_dir(self, task_attempt_id: str) -> str:
        return join(self.tasks_dir, check_id("task attempt id", task_attempt_id))

    def manifest_path(self, task_id: str) -> str:
        return join(self.manifests_dir, check_id("task id", task_id) + MANIFEST_SUFFIX)

    def temp_manifest_path(self, task_attempt_id: str) -> str:
        return join(
            self.manifests_dir, check_id("task attempt id", task_attempt_id) + TEMP_MANIFEST_SUFFIX
        )

    def with_hadoop_naming(self) -> JobLayout:
        return JobLayout(self.dest, self.job_id, self.attempt, hadoop_naming=True)
