"""The task-side public API: what a writer (Spark's shim, or any Python program) calls.

    ta = TaskAttemptCommitter("gs://bucket/table", job_id, task_id, task_attempt_id)
    ta.setup()
    with ta.open_output("year=2026/part-00000.parquet") as f: ...     # write the files
    with ta.open_output_at("/data/external/p=7", "part-00000.parquet") as f: ...  # elsewhere
    manifest = ta.commit()      # or ta.abort()

Nothing is visible in the destination until job commit; a committed task is its manifest.
"""

from __future__ import annotations

import time
from typing import BinaryIO

from committer import statistics as st
from committer.config import CommitterConfig
from committer.errors import ConfigError, JobConflictError
from committer.layout import CUSTOM_LOCATIONS_DIR, JobLayout, check_id, join
from committer.store import ManagedStore, open_store
from committer.task.manifest import save_manifest
from committer.task.scan import scan_task_directory
from manifest_schema import TaskManifest
from manifest_schema.uris import is_local, local_path, location_to_uri


def task_ids(job_id: str, task_number: int, attempt_number: int = 0) -> tuple[str, str]:
    """Hadoop-style ``(task id, task attempt id)`` for a job, for writers without their own."""
    check_id("job id", job_id)
    task = f"task_{job_id}_m_{task_number:06d}"
    return task, f"attempt_{job_id}_m_{task_number:06d}_{attempt_number}"


class TaskAttemptCommitter:
    """One task attempt of one job writing under ``dest``."""

    def __init__(
        self,
        dest: str,
        job_id: str,
        task_id: str,
        task_attempt_id: str,
        *,
        job_attempt: int = 0,
        config: CommitterConfig | None = None,
        store: ManagedStore | None = None,
    ) -> None:
        self.config = config or CommitterConfig()
        self.layout = JobLayout(dest, job_id, job_attempt)
        self.task_id = check_id("task id", task_id)
        self.task_attempt_id = check_id("task attempt id", task_attempt_id)
        self._owns_store = store is None
        self.store = store or open_store(self.layout.dest, self.config)
        self.working_dir = self.layout.task_attempt_dir(task_attempt_id)
        self._custom_locations: list[str] = []

    def setup(self) -> None:
        """Create the working directory. Refused once the job is committed or aborted (or if it
        was never set up): a late attempt must not recreate the job's directory."""
        self._require_job("set up")
        self.store.mkdirs(self.working_dir)

    def output_path(self, relative: str) -> str:
        """Where to write the file that job commit will place at ``dest/relative``."""
        parts = relative.split("/")
        if relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ConfigError(f"output path must be relative and plain, got {relative!r}")
        if parts[0] == CUSTOM_LOCATIONS_DIR:
            raise ConfigError(f"output path {relative!r}: {CUSTOM_LOCATIONS_DIR}/ is reserved "
                              "for output_path_at")
        return join(self.working_dir, relative)

    def open_output(self, relative: str) -> BinaryIO:
        """Open ``relative`` for writing in the working directory (parents created as needed)."""
        return self.store.open_write(self.output_path(relative))

    def output_path_at(self, directory: str, name: str) -> str:
        """Where to write the file that job commit will place at ``directory/name``, for a
        directory outside the destination (Spark's custom partition locations). The file is
        staged under ``_custom_locations/<n>/`` in the working directory; job commit must be
        given the directories (:attr:`custom_locations`) as ``extra_destination_roots``.
        The mapping lives in this object: commit with the committer that handed out the paths.
        """
        if name in ("", ".", "..") or "/" in name:
            raise ConfigError(f"file name must be one plain path segment, got {name!r}")
        location = local_path(directory) if is_local(directory) else directory
        location = location.rstrip("/")
        if not location.startswith("/") and "://" not in location:
            raise ConfigError(f"custom location must be absolute, got {directory!r}")
        if location not in self._custom_locations:
            self._custom_locations.append(location)
        index = self._custom_locations.index(location)
        return join(self.working_dir, CUSTOM_LOCATIONS_DIR, str(index), name)

    def open_output_at(self, directory: str, name: str) -> BinaryIO:
        """Open the file :meth:`output_path_at` names for writing."""
        return self.store.open_write(self.output_path_at(directory, name))

    @property
    def custom_locations(self) -> tuple[str, ...]:
        """The directories outside the destination this attempt has written for, in the order
        of their ``_custom_locations/<n>`` index."""
        return tuple(self._custom_locations)

    def commit(self) -> TaskManifest:
        """Scan the working directory into a manifest and make it the task's committed one."""
        try:
            return self._commit()
        finally:
            self.close()

    def _commit(self) -> TaskManifest:
        t0 = time.perf_counter()
        self._require_job("commit")
        scan_t0 = time.perf_counter()
        scan = scan_task_directory(self.store, self.working_dir, self.layout.dest,
                                   self._custom_locations)
        self.store.stats.timed(st.TASK_STAGE_SCAN, time.perf_counter() - scan_t0)
        self.store.stats.incr(st.COMMITTER_TASK_FILE_COUNT, len(scan.files))
        self.store.stats.incr(st.COMMITTER_TASK_FILE_SIZE, scan.total_size)
        self.store.stats.incr(st.COMMITTER_TASK_DIRECTORY_COUNT, len(scan.directories))
        manifest = TaskManifest(
            job_id=self.layout.job_id,
            job_attempt_number=self.layout.attempt,
            task_id=self.task_id,
            task_attempt_id=self.task_attempt_id,
            task_attempt_dir=location_to_uri(self.working_dir),
            files=scan.files,
            directories=scan.directories,
            iostatistics=self.store.stats.snapshot(),
        )
        save_manifest(self.store, self.layout, manifest, self.config.manifest_save_attempts)
        self.store.stats.timed(st.TASK_STAGE_COMMIT, time.perf_counter() - t0)
        return manifest

    def abort(self) -> None:
        """Delete the attempt's working directory and any manifest it was part-way saving.

        An attempt still running when its job was aborted or committed (Spark kills the rest of
        a failed stage while the driver aborts the job) may have recreated the job's directories
        after the job removed them; once the job is over, its empty directories go too."""
        t0 = time.perf_counter()
        try:
            self.store.delete_tree(self.working_dir)
            self.store.delete_file(self.layout.temp_manifest_path(self.task_attempt_id))
            if not self._job_is_set_up():
                self._remove_empty_job_dirs()
        finally:
            self.close()
        self.store.stats.timed(st.TASK_STAGE_ABORT, time.perf_counter() - t0)

    def _job_is_set_up(self) -> bool:
        # Job cleanup deletes the marker first, so a missing marker means the job is over.
        return self.store.exists(self.layout.job_marker)

    def _require_job(self, action: str) -> None:
        if not self._job_is_set_up():
            raise JobConflictError(
                f"task attempt {self.task_attempt_id} cannot {action}: job "
                f"{self.layout.job_id} is not set up under {self.layout.attempt_dir} "
                "(committed, aborted, or never set up)")

    def _remove_empty_job_dirs(self) -> None:
        """Only empty directories, deepest first: whatever another late attempt of the same job
        still holds stays (its own abort comes back for it), and ``_temporary``, which other
        jobs share, is left to job cleanup."""
        for path in (self.layout.tasks_dir, self.layout.manifests_dir, self.layout.attempt_dir,
                     self.layout.job_dir):
            self.store.remove_dir_if_empty(path)

    def close(self) -> None:
        """Release the store's connections if this committer opened it (``commit`` and
        ``abort`` do; the store reopens them if it is used again)."""
        if self._owns_store:
            self.store.close()
