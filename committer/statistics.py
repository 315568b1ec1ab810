"""Live IOStatistics: thread-safe counters and duration statistics, Hadoop-named.

A timed operation ``X`` records counter ``X`` (or ``X.failures``), and ``X.min``/``X.max``/
``X.mean`` in milliseconds, as Hadoop's DurationTracker does. Hot loops record in a local
:class:`Tally` and merge it once per batch, so the shared lock is not taken per file.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from manifest_schema.iostatistics import IOStatisticsSnapshot, MeanStatistic

# Statistic names (Hadoop's where they exist).
OP_RENAME = "op_rename"
# one whole directory moved by one rename (job commit's directory fast path); no Hadoop name
OP_RENAME_DIRECTORY = "op_rename_directory"
OP_MKDIRS = "op_mkdirs"
OP_DELETE = "op_delete"
OP_GET_FILE_STATUS = "op_get_file_status"
OP_LIST_STATUS = "op_list_status"
OP_LOAD_MANIFEST = "op_load_manifest"
OP_SAVE_FILE = "op_save_file"
OP_READ_FILE = "op_read_file"
COMMITTER_FILES_COMMITTED = "committer_files_committed"
COMMITTER_BYTES_COMMITTED = "committer_bytes_committed"
COMMITTER_TASK_FILE_COUNT = "committer_task_file_count"
COMMITTER_TASK_FILE_SIZE = "committer_task_file_size"
COMMITTER_TASK_DIRECTORY_COUNT = "committer_task_directory_count"
COMMITTER_TASK_MANIFEST_FILE_SIZE = "committer_task_manifest_file_size"
COMMITTER_TASKS_COMPLETED = "committer_tasks_completed"
# files committed inside directories moved whole, and directories that qualified for the move
# but were renamed file by file after all (their listing differed, or the destination appeared)
COMMITTER_FILES_IN_MOVED_DIRECTORIES = "committer_files_in_moved_directories"
COMMITTER_DIRECTORY_MOVE_FALLBACKS = "committer_directory_move_fallbacks"
# sources job commit identified itself before planning (manifest entries without "e"); the
# store operations that took are counted too: op_get_file_status per file on local disk,
# op_list_status per task attempt directory elsewhere
COMMITTER_SOURCES_IDENTIFIED = "committer_sources_identified"
RENAME_RECOVERED = "commit_file_rename_recovered"
# renames (a Data Lake rename, a flat copy) whose copy, sent in the latency tail, was refused
# and proven done by the destination's etag or MD5 before the first answer came (http/hedge.py)
RENAME_PROVEN_RACE = "commit_file_rename_proven_race"
# Waits, as durations (count, and min / max / mean in ms; the mean's sum is the total, the
# waiting threads' time added up): on the static rate cap (``io.rate.limit``), and backing off
# after the service refused a call as throttled (its Retry-After, or the retry's backoff).
STORE_IO_RATE_LIMITED = "store_io_rate_limited"
STORE_IO_THROTTLE_BACKOFF = "store_io_throttle_backoff"
# the renames' share of those two
OP_RENAME_RATE_LIMITED = "op_rename_rate_limited"
OP_RENAME_THROTTLE_BACKOFF = "op_rename_throttle_backoff"
STORE_IO_RETRY = "store_io_retry"
STORE_IO_THROTTLED = "store_io_throttled"
# Requests a cloud store sent in the commit, up to _SUCCESS (Hadoop's name; a batch is one
# request, a raced copy one more), and of them the copies sent to race a slow request
# (store/http/hedge.py: at most 5% of the requests), the copies that answered first (won) and
# those whose first request settled the race anyway (wasted)
STORE_IO_REQUEST = "store_io_request"
STORE_IO_REQUEST_RACED = "store_io_request_raced"
STORE_IO_REQUEST_RACE_WON = "store_io_request_race_won"
STORE_IO_REQUEST_RACE_WASTED = "store_io_request_race_wasted"
# worker processes a commit started to spread its renames over more request loops (fanout.py)
STORE_PROCESSES_STARTED = "store_processes_started"
COMMIT_JOB = "committer_commit_job"
STAGE_SETUP = "job_stage_setup"
STAGE_LOAD_MANIFESTS = "job_stage_load_manifests"
STAGE_CREATE_TARGET_DIRS = "job_stage_create_target_dirs"
STAGE_RENAME_FILES = "job_stage_rename_files"
# the wall time of the rename stage during which the static rate cap held some rename back
# (one sample per commit, as the stage's own duration; 0 when the cap never bound)
STAGE_RENAME_RATE_LIMITED = "job_stage_rename_files_rate_limited"
STAGE_VALIDATE_OUTPUT = "job_stage_optional_validate_output"
STAGE_SAVE_SUCCESS = "job_stage_save_success_marker"
STAGE_CLEANUP = "job_stage_cleanup"
STAGE_ABORT = "job_stage_abort"
TASK_STAGE_COMMIT = "task_stage_commit"
TASK_STAGE_SCAN = "task_stage_scan_directory"
TASK_STAGE_SAVE_MANIFEST = "task_stage_save_manifest"
TASK_STAGE_ABORT = "task_stage_abort_task"

#: the waits a commit's summaries show (the CLI's, the demo's), with what each one is
WAITS: tuple[tuple[str, str], ...] = (
    (STAGE_RENAME_RATE_LIMITED, "rename stage held back by the static rate cap (wall)"),
    (OP_RENAME_RATE_LIMITED, "renames waiting on the static rate cap"),
    (OP_RENAME_THROTTLE_BACKOFF, "renames backing off after throttling"),
    (STORE_IO_RATE_LIMITED, "all calls waiting on the static rate cap"),
    (STORE_IO_THROTTLE_BACKOFF, "all calls backing off after throttling"),
)

#: the requests a commit's summaries show (the CLI's), with what each one is
REQUESTS: tuple[tuple[str, str], ...] = (
    (STORE_IO_REQUEST, "requests sent (copies included)"),
    (STORE_IO_REQUEST_RACED, "copies sent to race a slow request"),
    (STORE_IO_REQUEST_RACE_WON, "races the copy won"),
    (STORE_IO_REQUEST_RACE_WASTED, "races the first request won (copy wasted)"),
)


@dataclass
class _Duration:
    samples: int = 0
    total_ms: float = 0.0
    min_ms: float = float("inf")
    max_ms: float = 0.0

    def add(self, ms: float) -> None:
        self.samples += 1
        self.total_ms += ms
        self.min_ms = min(self.min_ms, ms)
        self.max_ms = max(self.max_ms, ms)

    def absorb(self, other: _Duration) -> None:
        self.samples += other.samples
        self.total_ms += other.total_ms
        self.min_ms = min(self.min_ms, other.min_ms)
        self.max_ms = max(self.max_ms, other.max_ms)


@dataclass
class Tally:
    """Unsynchronised statistics for one worker's batch; merge into :class:`IOStatistics`."""

    counters: dict[str, int] = field(default_factory=dict)
    durations: dict[str, _Duration] = field(default_factory=dict)

    def incr(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def timed(self, name: str, seconds: float, failed: bool = False) -> None:
        key = f"{name}.failures" if failed else name
        self.counters[key] = self.counters.get(key, 0) + 1
        d = self.durations.get(key)
        if d is None:
            d = self.durations[key] = _Duration()
        d.add(seconds * 1000.0)

    def timed_many(self, name: str, count: int, seconds: float) -> None:
        """``count`` operations timed together (a tight loop too fast to time each one):
        each counts as a sample of the mean, so min and max are those of the batch means."""
        if count <= 0:
            return
        self.counters[name] = self.counters.get(name, 0) + count
        d = self.durations.get(name)
        if d is None:
            d = self.durations[name] = _Duration()
        ms = seconds * 1000.0
        d.samples += count
        d.total_ms += ms
        d.min_ms = min(d.min_ms, ms / count)
        d.max_ms = max(d.max_ms, ms / count)


class IOStatistics:
    """Thread-safe statistics shared by every stage of one commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tally = Tally()
        self._gauges: dict[str, int] = {}

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._tally.incr(name, n)

    def timed(self, name: str, seconds: float, failed: bool = False) -> None:
        with self._lock:
            self._tally.timed(name, seconds, failed)

    def set_gauge(self, name: str, value: int) -> None:
        with self._lock:
            self._gauges[name] = value

    def merge(self, tally: Tally) -> None:
        with self._lock:
            for k, v in tally.counters.items():
                self._tally.counters[k] = self._tally.counters.get(k, 0) + v
            for k, d in tally.durations.items():
                mine = self._tally.durations.get(k)
                if mine is None:
                    mine = self._tally.durations[k] = _Duration()
                mine.absorb(d)

    def counter(self, name: str) -> int:
        with self._lock:
            return self._tally.counters.get(name, 0)

    def take(self) -> Tally:
        """Everything counted so far, as a tally (to merge elsewhere), and start again from
        nothing; gauges stay."""
        with self._lock:
            taken, self._tally = self._tally, Tally()
            return taken

    def snapshot(self) -> IOStatisticsSnapshot:
        with self._lock:
            mins: dict[str, int] = {}
            maxs: dict[str, int] = {}
            means: dict[str, MeanStatistic] = {}
            for k, d in self._tally.durations.items():
                if d.samples:
                    mins[f"{k}.min"] = round(d.min_ms)
                    maxs[f"{k}.max"] = round(d.max_ms)
                    means[f"{k}.mean"] = MeanStatistic(d.samples, round(d.total_ms))
            return IOStatisticsSnapshot(
                dict(self._tally.counters), dict(self._gauges), mins, maxs, means
            )
