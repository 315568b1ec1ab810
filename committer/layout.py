"""Every name the committer uses under a destination and a job directory, in one place.

    <dest>/_SUCCESS                                             the job summary (success marker)
    <dest>/_manifest_committer/lock/<generation>.lease          the destination lock's leases
    <dest>/_manifest_committer/history/<jobId>.json             one record per committed job
    <dest>/_temporary/manifest_<jobId>/<attempt %02d>/          job attempt directory
        _job.json                                               job marker (setup, exclusive)
        _journal.json                                           commit journal (durability)
        tasks/<taskAttemptId>/...                               task attempt working directories
        tasks/<taskAttemptId>/_custom_locations/<n>/...         files for the n-th directory a
                                                                task asked for outside dest
        manifests/<taskId>-manifest.json                        committed task manifests
        manifests/<taskAttemptId>-manifest.json.tmp             a manifest being saved
        replaced/d/<path below dest>                            data an overwrite moved aside
        replaced/x/<hash of path>                               ... from outside dest
        displaced/d/<path below dest>                           files last-writer-wins displaced
        moved/<hash of path>.json                               records of moves outside dest
        identities/sources-<n>.json                             source identities job commit
                                                                recorded where a manifest has none
        _SUCCESS.tmp, _SUCCESS.previous, _history.tmp           the marker's and record's saves

Hadoop's own ManifestCommitter names the job directory ``<jobId>`` without the ``manifest_``
prefix; both are recognised when reading (:func:`parse_attempt_dir`). This module does no I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from committer.errors import ConfigError
from manifest_schema.uris import is_local, local_path

TEMPORARY_DIR = "_temporary"
JOB_DIR_PREFIX = "manifest_"
TASKS_DIR = "tasks"
# Spark's partition directories always contain '=', so this name cannot be one of them; plain
# output paths may not start with it (``TaskAttemptCommitter.output_path``).
CUSTOM_LOCATIONS_DIR = "_custom_locations"
MANIFESTS_DIR = "manifests"
MANIFEST_SUFFIX = "-manifest.json"
TEMP_MANIFEST_SUFFIX = "-manifest.json.tmp"
SUCCESS_MARKER = "_SUCCESS"
JOB_MARKER = "_job.json"
JOURNAL = "_journal.json"
TEMP_SUFFIX = ".tmp"
SUCCESS_TEMP = "_SUCCESS.tmp"
PREVIOUS_SUCCESS = "_SUCCESS.previous"
HISTORY_TEMP = "_history.tmp"
REPLACED_DIR = "replaced"
DISPLACED_DIR = "displaced"
MOVE_RECORDS_DIR = "moved"
IDENTITIES_DIR = "identities"
IDENTITIES_PREFIX = "sources-"
UNDER_DEST = "d"  # below replaced/ and displaced/: data that lived under the destination
ELSEWHERE = "x"  # ... and data that lived outside it (custom partition locations)
#: the committer's own directory in the destination (lock, history); never moved aside
COMMITTER_DIR = "_manifest_committer"
LOCK_DIR = f"{COMMITTER_DIR}/lock"
LEASE_SUFFIX = ".lease"
HISTORY_DIR = f"{COMMITTER_DIR}/history"
RECORD_SUFFIX = ".json"
REPORT_PREFIX = "summary-"

# Ids become path segments: anything that could climb out of, or hide in, a directory is refused.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}$")
_ATTEMPT = re.compile(r"^\d{2}$")


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


def basename(location: str) -> str:
    return location.rstrip("/").rsplit("/", 1)[-1]


def parent(location: str) -> str:
    return location.rstrip("/").rpartition("/")[0] or "/"


def normalise_dest(dest: str) -> str:
    """One spelling per location: a local destination is a plain path (``file:///x`` and
    ``file:/x`` become ``/x``), as the local store reports its listings."""
    dest = local_path(dest) if is_local(dest) else dest
    return dest.rstrip("/") or "/"


def path_key(path: str) -> str:
    """A fixed-length name for a location (records and aside copies of paths outside dest)."""
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:32]


# -- the destination ----------------------------------------------------------------------------


def success_marker(dest: str) -> str:
    return join(dest, SUCCESS_MARKER)


def lock_dir(dest: str) -> str:
    return join(dest, LOCK_DIR)


def lease_path(dest: str, generation: int) -> str:
    return join(lock_dir(dest), f"{generation:012d}{LEASE_SUFFIX}")


def lease_generation(name: str) -> int | None:
    """The generation a lease file's name stands for, or ``None`` if it is not a lease."""
    stem = name[: -len(LEASE_SUFFIX)] if name.endswith(LEASE_SUFFIX) else ""
    return int(stem) if stem.isdigit() else None


def history_dir(dest: str) -> str:
    return join(dest, HISTORY_DIR)


def history_record_path(dest: str, job_id: str) -> str:
    return join(history_dir(dest), job_id + RECORD_SUFFIX)


def history_record_job(name: str) -> str | None:
    """The job id a history record's file name stands for, or ``None``."""
    return name[: -len(RECORD_SUFFIX)] if name.endswith(RECORD_SUFFIX) else None


def report_path(directory: str, job_id: str) -> str:
    """A job summary's copy in the summary report directory."""
    return join(directory, f"{REPORT_PREFIX}{job_id}.json")


def checksum_side_file(name: str) -> str:
    """The checksum file Hadoop's local filesystem writes beside file ``name`` (a task's
    writer leaves one per file; it is not output, and readers through Hadoop never list it)."""
    return f".{name}.crc"


def is_checksum_side_file(name: str) -> bool:
    return name.startswith(".") and name.endswith(".crc")


def is_committer_dir(dest: str, path: str) -> bool:
    """True for the committer's own directories in ``dest`` (and what lies below them), which
    an overwrite never replaces."""
    rel = path[len(dest) + 1:] if path.startswith(dest + "/") else None
    return rel is not None and rel.split("/", 1)[0] in (TEMPORARY_DIR, COMMITTER_DIR)


# -- a job attempt ------------------------------------------------------------------------------


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
        object.__setattr__(self, "dest", normalise_dest(self.dest))

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
        return success_marker(self.dest)

    @property
    def job_marker(self) -> str:
        return join(self.attempt_dir, JOB_MARKER)

    @property
    def journal(self) -> str:
        return join(self.attempt_dir, JOURNAL)

    @property
    def journal_temp(self) -> str:
        return self.journal + TEMP_SUFFIX

    @property
    def success_temp(self) -> str:
        return join(self.attempt_dir, SUCCESS_TEMP)

    @property
    def previous_success(self) -> str:
        return join(self.attempt_dir, PREVIOUS_SUCCESS)

    @property
    def history_temp(self) -> str:
        return join(self.attempt_dir, HISTORY_TEMP)

    @property
    def move_records_dir(self) -> str:
        return join(self.attempt_dir, MOVE_RECORDS_DIR)

    def move_record_path(self, original: str) -> str:
        return join(self.move_records_dir, path_key(original) + RECORD_SUFFIX)

    @property
    def identities_dir(self) -> str:
        return join(self.attempt_dir, IDENTITIES_DIR)

    def identities_path(self, n: int) -> str:
        """The ``n``-th file in which job commit records the identities of source files that
        their manifests give none for (``durability/identities.py``); an older version wrote
        one per task attempt, named by its id (still read: every file there is)."""
        return join(self.identities_dir, f"{IDENTITIES_PREFIX}{n:05d}{RECORD_SUFFIX}")

    def aside_root(self, kind: str) -> str:
        """Where data from under dest goes when moved aside: ``kind`` is ``REPLACED_DIR`` or
        ``DISPLACED_DIR``; the tree mirrors the destination."""
        return join(self.attempt_dir, kind, UNDER_DEST)

    def aside_location(self, path: str, kind: str = REPLACED_DIR) -> str:
        """Where ``path`` goes when it is moved aside."""
        path = path.rstrip("/")
        if path == self.dest:
            return self.aside_root(kind)
        if path.startswith(self.dest + "/"):
            return join(self.aside_root(kind), path[len(self.dest) + 1:])
        return join(self.attempt_dir, kind, ELSEWHERE, path_key(path))

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


def manifest_task_id(name: str) -> str | None:
    """The task id a committed manifest's file name stands for; ``None`` for anything else
    (a manifest being saved, another file)."""
    return name[: -len(MANIFEST_SUFFIX)] if name.endswith(MANIFEST_SUFFIX) else None


def is_attempt_name(name: str) -> bool:
    """True for the name of a job attempt directory (``NN``)."""
    return _ATTEMPT.match(name) is not None


def parse_job_dir_name(name: str) -> tuple[str, bool] | None:
    """``(job id, hadoop naming)`` for the name of a directory under ``_temporary``, or
    ``None`` when it cannot be a job directory (its name is not a valid job id)."""
    hadoop = not name.startswith(JOB_DIR_PREFIX)
    job_id = name if hadoop else name[len(JOB_DIR_PREFIX):]
    return (job_id, hadoop) if is_valid_id(job_id) else None


def parse_attempt_dir(location: str) -> JobLayout | None:
    """The job attempt a ``<dest>/_temporary/<job dir>/NN`` location is, or ``None`` when the
    path does not have that shape (a copy elsewhere tells nothing)."""
    location = location.rstrip("/")
    name = basename(location)
    job_dir = parent(location)
    temporary = parent(job_dir)
    if not is_attempt_name(name) or basename(temporary) != TEMPORARY_DIR:
        return None
    parsed = parse_job_dir_name(basename(job_dir))
    if parsed is None:
        return None
    job_id, hadoop = parsed
    return JobLayout(parent(temporary), job_id, int(name), hadoop_naming=hadoop)


def dest_of(location: str) -> str | None:
    """The destination a location inside a job's temporary tree lies under, else ``None``."""
    i = location.rfind(f"/{TEMPORARY_DIR}/")
    return location[:i] if i > 0 else None
