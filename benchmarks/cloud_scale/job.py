"""A committed-but-not-job-committed job, put straight into the simulated account.

Writing a million files through the task side would take hours of uploads that measure
nothing job commit does; what job commit reads is the manifests, and what it moves is the
sources they name. So: ``JobCommitter.setup`` runs against the account as a driver would (it
writes the job marker and creates the directories), the sources are stored by the simulator's
control API (content-less: a size, and the etag / MD5 the account reports for them), and each
task's manifest, as the task side would have written it (``TaskManifest/1``: source,
destination, size and the identity the store reports for the source, directories to create),
is stored under the task's committed-manifest name. The destination is a table of
``partitions`` directories that every task writes into (Hive's usual layout): files move one
by one. With ``owned``, each task writes into a directory of its own (``p=<task>``, the
``repartition(col)`` layout): on a store that renames a directory in one request the commit
moves each whole.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from committer import task_ids
from committer.config import CommitterConfig
from committer.job import JobCommitter
from committer.layout import JobLayout
from committer.testing.cloud_sim import CloudSim
from manifest_schema import DirEntry, DirStatus, FileEntry, TaskManifest
from manifest_schema.uris import location_to_uri

__all__ = ["BUCKET", "SimJob", "generate", "identity_of"]

BUCKET = "data"
FILE_SIZE = 1024
_TASKS_PER_CALL = 10  # tasks whose sources go to the simulator in one control request


@dataclass
class SimJob:
    """What the trial commits and what the destination must hold afterwards."""

    service: str
    dest: str
    job_id: str
    committed: dict[str, str]
    files: int
    #: destination key -> (size, identity) for every file the manifests name
    expected: dict[str, tuple[int, str]] = field(default_factory=dict)

    def description(self) -> dict[str, Any]:
        return {"dest": self.dest, "job_id": self.job_id, "committed": self.committed,
                "files": self.files}


def identity_of(service: str, answer: dict[str, Any]) -> str:
    """What the task side records (``Store.identity``) for a source the simulator stored: the
    etag where a rename keeps it (ADLS), else the MD5 a copy keeps (flat Blob, GCS)."""
    if service == "adls":
        return str(answer["etag"]).strip('"')
    return "md5:" + base64.b64decode(answer["md5"]).hex()


def _key(location: str) -> str:
    return location.split("://", 1)[1].split("/", 1)[1]


def generate(sim: CloudSim, service: str, files: int, tasks: int, partitions: int,
             job_id: str, config: CommitterConfig, table: str = "table", *,
             owned: bool = False) -> SimJob:
    scheme = "gs" if service == "gcs" else "abfs"
    dest = f"{scheme}://{BUCKET}/{table}"
    JobCommitter(dest, job_id, config=config).setup()
    layout = JobLayout(dest, job_id)
    job = SimJob(service, dest, job_id, {}, files)
    per_task = [files // tasks + (1 if t < files % tasks else 0) for t in range(tasks)]
    first = 0
    for start in range(0, tasks, _TASKS_PER_CALL):
        group = range(start, min(start + _TASKS_PER_CALL, tasks))
        sources: list[tuple[int, str, str]] = []  # (task, source, destination)
        for t in group:
            _, attempt = task_ids(job_id, t)
            root = layout.task_attempt_dir(attempt)
            for i in range(per_task[t]):
                part = t if owned else (first + i) % partitions
                rel = f"p={part:04d}/part-{t:05d}-{i:05d}.parquet"
                sources.append((t, f"{root}/{rel}", f"{dest}/{rel}"))
            first += per_task[t]
        answers = sim.populate({"bucket": BUCKET, "key": _key(src), "size": FILE_SIZE}
                               for _, src, _ in sources)
        entries: dict[int, list[FileEntry]] = {t: [] for t in group}
        for (t, src, dst), answer in zip(sources, answers, strict=True):
            ident = identity_of(service, answer)
            entries[t].append(FileEntry(location_to_uri(src), location_to_uri(dst), FILE_SIZE,
                                        ident))
            job.expected[_key(dst)] = (FILE_SIZE, ident)
        sim.populate(_manifests(layout, job, group, entries))
    return job


def _manifests(layout: JobLayout, job: SimJob, group: range,
               entries: dict[int, list[FileEntry]]) -> Iterator[dict[str, Any]]:
    for t in group:
        task, attempt = task_ids(job.job_id, t)
        dirs = sorted({e.dest.rsplit("/", 1)[0] for e in entries[t]})
        manifest = TaskManifest(
            job.job_id, 0, task, attempt, location_to_uri(layout.task_attempt_dir(attempt)),
            tuple(entries[t]), tuple(DirEntry(d, DirStatus.UNKNOWN, 1) for d in dirs))
        job.committed[task] = attempt
        yield {"bucket": BUCKET, "key": _key(layout.manifest_path(task)),
               "data_b64": base64.b64encode(manifest.dumps()).decode("ascii")}
