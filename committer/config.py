"""All configuration, in one place, under Hadoop's key names where the meaning is the same.

A :class:`CommitterConfig` is built from keyword arguments or from a Hadoop/Spark configuration
mapping (``CommitterConfig.from_hadoop_conf``); keys may carry Spark's ``spark.hadoop.`` prefix.
Every key is documented in ``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from committer.errors import ConfigError

PREFIX = "mapreduce.manifest.committer."
SPARK_HADOOP_PREFIX = "spark.hadoop."
#: the static cap, in store operations a second, of a commit on a cloud store when none is set:
#: the smallest standard Azure account's rate (20,000/s; 40,000/s in the large regions), under
#: which the adaptive limit paces by the refusals it sees (store/http/limiter.py), as it follows
#: a GCS bucket's ramp. Hadoop's ABFS takes 1,000 (``fs.azure.io.rate.limit``) for a client
#: that cannot adapt. Raise it with io.rate.limit (or fs.azure.io.rate.limit) on a 40,000/s
#: account that the commit has to itself (docs/configuration.md).
DEFAULT_CLOUD_RATE_LIMIT = 20_000


@dataclass(frozen=True)
class Key:
    name: str  # the Hadoop-style configuration key
    attr: str  # the CommitterConfig attribute it sets
    parse: Callable[[str], Any]


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes", "on"):
        return True
    if t in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _opt_str(text: str) -> str | None:
    return text.strip() or None


LOCK_MODES = ("auto", "always", "never")
CONFLICT_POLICIES = ("fail", "last-writer-wins")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return value

    return parse


@dataclass(frozen=True)
class CommitterConfig:
    """Immutable settings for task and job commit. Defaults follow Hadoop's where they exist."""

    # Store operations in flight at once in every parallel stage (load, mkdirs, rename, cleanup).
    io_threads: int = 32
    # Also write the job summary to <dir>/summary-<jobId>.json, on failure too.
    summary_report_directory: str | None = None
    # Move the committed manifests to <dir>/<jobId>/ after a successful commit.
    diagnostics_manifest_directory: str | None = None
    # Delete task attempt directories in parallel before the job directory.
    cleanup_parallel_delete: bool = True
    # Leave the job directory in place after commit (for debugging).
    cleanup_skipped: bool = False
    # After the renames, check each destination's size (and etag) before _SUCCESS is written.
    validate_output: bool = False
    # Delete an existing destination file instead of failing the rename; delete a file standing
    # where a directory must be created.
    delete_target_files: bool = False
    # Attempts at saving a task manifest.
    manifest_save_attempts: int = 5
    # Write the _SUCCESS summary into the destination.
    mark_successful_jobs: bool = True
    # Store operations per second across all stages (a static cap under the adaptive limit);
    # 0 means no cap. None (not set): DEFAULT_CLOUD_RATE_LIMIT on a cloud store (Azure, GCS),
    # no cap elsewhere (Store.account_rate_limited).
    io_rate_limit: int | None = None
    # Retries of transient store failures (timeouts, resets, lost answers): how many after
    # the first call, and the backoff's scale and bound.
    retry_attempts: int = 6
    # Retries of an operation the service refused (throttled: not done, asked to come back):
    # a rate signal, not a fault, so more (Hadoop's ABFS client retries 30 times).
    retry_throttled_attempts: int = 30
    retry_initial_delay_ms: int = 50
    retry_max_delay_ms: int = 10_000
    # Largest task manifest job commit will read, in bytes; larger ones are refused unread.
    manifest_max_bytes: int = 256 * 1024 * 1024
    # Destination file names recorded in _SUCCESS (as Hadoop: the first 100).
    success_file_names: int = 100
    # Crash safety and concurrency (docs/configuration.md, "Crash safety and concurrency").
    # Destination lock: "auto" takes it for overwrite commits only, "always", or "never".
    lock_mode: str = "auto"
    # How long a commit waits for another job's lock before failing, and how long a lease
    # lives without a heartbeat before another job may take it over.
    lock_wait_ms: int = 120_000
    lock_lease_ms: int = 60_000
    # Record each commit under <dest>/_manifest_committer/history/; a repeated commit of a
    # recorded job id is then a no-op returning the first commit's summary.
    history_enabled: bool = True
    # Abort undoes what a failed or interrupted commit did (and restores moved-aside data).
    abort_rollback: bool = True
    # A destination file that already exists: "fail", or "last-writer-wins" (the old file is
    # moved aside into the job directory, so a rollback can put it back).
    conflict_policy: str = "fail"
    # Job commit moves a directory that one task alone writes into, and that does not exist at
    # the destination, with one rename, where the store renames directories atomically.
    rename_directories: bool = True
    # Cloud stores: request loops for a commit's renames, counting the committing process's
    # own; more are worker processes, started while the one loop is saturated. 0: as many as
    # the CPUs; 1: only the committing process's loop.
    store_processes: int = 0
    # Local disk: follow symbolic links beneath the destination when renaming and creating
    # directories (by default one there is refused: it could lead the commit outside).
    destination_follow_symlinks: bool = False
    # fsspec storage options for the destination's store (credentials, endpoints).
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # Keys under the committer prefix that this version does not know (kept for diagnostics).
    unrecognised_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        positive = ("io_threads", "manifest_save_attempts", "retry_attempts",
                    "retry_throttled_attempts", "manifest_max_bytes")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        non_negative = ("io_rate_limit", "retry_initial_delay_ms", "retry_max_delay_ms",
                        "success_file_names", "store_processes")
        for name in non_negative:
            if (getattr(self, name) or 0) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.lock_mode not in LOCK_MODES or self.conflict_policy not in CONFLICT_POLICIES:
            raise ConfigError(f"lock_mode must be one of {LOCK_MODES} and conflict_policy one "
                              f"of {CONFLICT_POLICIES}, got {self.lock_mode!r}, "
                              f"{self.conflict_policy!r}")
        if self.lock_wait_ms < 0 or self.lock_lease_ms < 1000:
            raise ConfigError("lock_wait_ms must not be negative and lock_lease_ms must be at "
                              f"least 1000, got {self.lock_wait_ms}, {self.lock_lease_ms}")

    @classmethod
    def from_hadoop_conf(
        cls, conf: Mapping[str, str], **overrides: Any
    ) -> CommitterConfig:
        """Build from Hadoop/Spark keys; unknown committer keys are kept, not fatal (as Hadoop)."""
        values: dict[str, Any] = {}
        unknown: list[str] = []
        for raw_key, raw_value in conf.items():
            key = raw_key[len(SPARK_HADOOP_PREFIX):] if raw_key.startswith(
                SPARK_HADOOP_PREFIX) else raw_key
            spec = KEYS_BY_NAME.get(key)
            if spec is None:
                if key.startswith(PREFIX):
                    unknown.append(key)
                continue
            try:
                values[spec.attr] = spec.parse(str(raw_value))
            except ValueError as e:
                raise ConfigError(f"configuration key {key}: {e}") from None
        values.update(overrides)
        values.setdefault("unrecognised_keys", tuple(sorted(unknown)))
        return cls(**values)

    def to_hadoop_conf(self) -> dict[str, str]:
        """The settings as Hadoop keys (storage options excluded: they may hold secrets)."""
        out: dict[str, str] = {}
        for spec in KEYS:
            value = getattr(self, spec.attr)
            if value is None:
                continue
            out[spec.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


KEYS: tuple[Key, ...] = (
    Key(PREFIX + "io.threads", "io_threads", int),
    Key(PREFIX + "summary.report.directory", "summary_report_directory", _opt_str),
    Key(PREFIX + "diagnostics.manifest.directory", "diagnostics_manifest_directory", _opt_str),
    Key(PREFIX + "cleanup.parallel.delete", "cleanup_parallel_delete", _bool),
    Key("mapreduce.fileoutputcommitter.cleanup.skipped", "cleanup_skipped", _bool),
    Key(PREFIX + "validate.output", "validate_output", _bool),
    Key(PREFIX + "delete.target.files", "delete_target_files", _bool),
    Key(PREFIX + "manifest.save.attempts", "manifest_save_attempts", int),
    Key("mapreduce.fileoutputcommitter.marksuccessfuljobs", "mark_successful_jobs", _bool),
    Key(PREFIX + "io.rate.limit", "io_rate_limit", int),
    Key(PREFIX + "retry.attempts", "retry_attempts", int),
    Key(PREFIX + "retry.throttled.attempts", "retry_throttled_attempts", int),
    Key(PREFIX + "retry.initial.delay.ms", "retry_initial_delay_ms", int),
    Key(PREFIX + "retry.max.delay.ms", "retry_max_delay_ms", int),
    Key(PREFIX + "manifest.max.bytes", "manifest_max_bytes", int),
    Key(PREFIX + "success.file.names", "success_file_names", int),
    Key(PREFIX + "lock.mode", "lock_mode", _choice(*LOCK_MODES)),
    Key(PREFIX + "lock.wait.ms", "lock_wait_ms", int),
    Key(PREFIX + "lock.lease.ms", "lock_lease_ms", int),
    Key(PREFIX + "history.enabled", "history_enabled", _bool),
    Key(PREFIX + "abort.rollback", "abort_rollback", _bool),
    Key(PREFIX + "conflict.policy", "conflict_policy", _choice(*CONFLICT_POLICIES)),
    Key(PREFIX + "rename.directories", "rename_directories", _bool),
    Key(PREFIX + "destination.follow.symlinks", "destination_follow_symlinks", _bool),
    Key(PREFIX + "store.processes", "store_processes", int),
)
KEYS_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}

_attrs = {f.name for f in fields(CommitterConfig)}
assert all(k.attr in _attrs for k in KEYS), "a configuration key names no CommitterConfig field"
