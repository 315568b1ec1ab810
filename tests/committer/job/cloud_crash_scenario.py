"""A job on the simulated account (Data Lake, flat Blob, GCS, or a GCS bucket with a hierarchical
namespace) whose commit is SIGKILLed at a chosen moment of a chosen stage, and the destination's
states it must end in (test harness only).

The job (``benchmarks/cloud_scale/job.py``: sources and manifests put straight into the
account) is a dynamic partition overwrite of a table that already holds data: a partition the
job replaces (``p=0000``, moved aside and, after a rollback, restored), a partition it does not
touch, a file at the top, and the previous job's ``_SUCCESS``. On the hierarchical namespace
path (``gcs-hns``) each task writes a partition of its own, so that the commit moves each
directory whole with one folder rename, the replaced partition too. The committing process is a
child of a fork server (``cloud_crash_child.py``) that reports its stages over a pipe; the test
kills it with SIGKILL at a point drawn within one stage of the uninterrupted commit (a number of
that stage's items done, or the end of the stage before one that reports no progress), where
the child stops and waits for it: a point in the commit's work, not a moment of the clock.

A snapshot lists everything below the table as the account reports it (every object with its
size and identity: the etag on Data Lake, whose rename keeps it, else the MD5 a copy keeps;
directories on Data Lake, folders on a GCS bucket with a hierarchical namespace; the zero-byte
directory markers of the flat stores), without the
job's own directory and the lock's leases; ``_SUCCESS`` is reduced to whose it is, the history
to the job ids it records. "Exactly committed" is the uninterrupted commit's snapshot with this
run's identities; "exactly before" is the snapshot taken before the commit started.
"""

from __future__ import annotations

import base64
import multiprocessing
import os
import random
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import orjson

from benchmarks.cloud_scale.job import BUCKET, SimJob, generate
from committer import CommitterConfig
from committer.job import JobCommitter
from committer.store import ManagedStore, open_store
from committer.testing.cloud_sim import CloudSim
from tests.committer.job.cloud_crash_child import KillPoint, stage_label

JOB = "jcloudcrash0001"
TABLE = "table"
#: what the table holds before the job: a partition the job replaces, one it leaves alone
EXISTING = {"p=0000/old-0.parquet": b"old partition zero",
            "p=0000/sub/old-0b.parquet": b"old, one level down",
            "q=keep/old-keep.parquet": b"a partition the job does not write",
            "top.csv": b"a file at the top"}
PREVIOUS_SUCCESS = orjson.dumps({"name": "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1",
                                 "jobId": "job_previous", "success": True})
REPLACED = "p=0000/"
#: a commit's stages, in the order they run (``StageRunner`` names), and the share of kill
#: points each gets: most of a commit's requests are renames (copies and batched deletes);
#: ``save_success_marker`` reports no progress: its points are the end of the stage before it
STAGE_WEIGHTS = {"load_manifests": 2, "replace_partitions": 1, "create_directories": 1,
                 "rename_files": 6, "save_success_marker": 1, "cleanup": 1}

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["tests.committer.job.cloud_crash_child"])
_CHILD_LOCK = threading.Lock()

Snapshot = dict[str, Any]


@dataclass
class Prepared:
    """One staged run of the job: what to commit and the destination before it."""

    job: SimJob
    before: Snapshot


@dataclass
class ChildRun:
    """What a child did before it ended: its messages, whether it was killed."""

    killed: bool
    events: list[tuple[Any, ...]] = field(default_factory=list)

    def failure(self) -> str | None:
        return next((str(e[1]) for e in self.events if e[0] == "failed"), None)

    def timeline(self) -> list[tuple[str, float]]:
        """``(stage, seconds after "go" when it ended)`` for every stage that ended, named by
        ``stage_label`` (a dynamic overwrite's first ``create_directories`` run, which moves
        the replaced partitions aside, is ``replace_partitions``)."""
        go = next(e[1] for e in self.events if e[0] == "go")
        seen: set[str] = set()
        return [(stage_label(str(e[1]), seen), float(e[2]) - go)
                for e in self.events if e[0] == "stage"]

    def totals(self) -> dict[str, int]:
        """The number of items of each stage that reports progress, as it reported it."""
        out: dict[str, int] = {}
        for e in self.events:
            if e[0] == "begin":
                out.setdefault(str(e[1]), int(e[3]))
        return out


#: the paths, and the simulator's service each runs on
PATHS = {"adls": "adls", "blob": "blob", "gcs": "gcs", "gcs-hns": "gcs"}


class CloudCrash:
    """The job on one simulated account, staged afresh for each run. ``service`` is the path
    (``PATHS``); on ``gcs-hns`` every task owns its partition (``owned``)."""

    def __init__(self, sim: CloudSim, service: str, files: int, tasks: int,
                 partitions: int) -> None:
        self.sim = sim
        self.service = service
        self.api = PATHS[service]
        self.owned = service == "gcs-hns"
        self.files, self.tasks, self.partitions = files, tasks, partitions
        storage = sim.trusted_options
        #: the engine's defaults: what a user who names nothing but the account gets
        self.config_values: dict[str, Any] = {"storage_options": storage}
        scheme = "gs" if self.api == "gcs" else "abfs"
        self.dest = f"{scheme}://{BUCKET}/{TABLE}"

    def config(self) -> CommitterConfig:
        return CommitterConfig(**self.config_values)

    def store(self) -> ManagedStore:
        return open_store(self.dest, self.config())

    # -- staging -------------------------------------------------------------------------------

    def prepare(self) -> Prepared:
        """An empty account, the table's existing data, then the job's sources and manifests."""
        self.sim.reset()
        self.sim.populate(
            [{"bucket": BUCKET, "key": f"{TABLE}/{rel}",
              "data_b64": base64.b64encode(data).decode("ascii")}
             for rel, data in [*EXISTING.items(), ("_SUCCESS", PREVIOUS_SUCCESS)]])
        job = generate(self.sim, self.api, self.files, self.tasks, self.partitions, JOB,
                       self.config(), table=TABLE, owned=self.owned)
        return Prepared(job, self.snapshot())

    # -- the committing process ---------------------------------------------------------------

    def run_child(self, action: str, prepared: Prepared, kill: KillPoint | None = None
                  ) -> ChildRun:
        """Run ``action`` in a child; with ``kill``, SIGKILL it where it stops at that point
        (if it gets there: a recovery may end before)."""
        from tests.committer.job.cloud_crash_child import child_main

        with _CHILD_LOCK:  # one child at a time, alone with the account
            ours, theirs = _CONTEXT.Pipe(duplex=False)
            child = _CONTEXT.Process(
                target=child_main,
                args=(theirs, action, self.dest, JOB, prepared.job.committed,
                      self.config_values, kill))
            child.start()
            theirs.close()
            run = ChildRun(killed=False)
            try:
                run.killed = _follow(child.pid, ours, run.events)
                child.join(600)
                if child.exitcode is None:
                    child.kill()
                    child.join()
                    raise AssertionError(f"{action} did not finish in 600 s")
                if run.killed:
                    assert child.exitcode == -9, child.exitcode
            finally:
                ours.close()
                child.close()
        return run

    # -- what the account holds ------------------------------------------------------------------

    def _identity(self, obj: Mapping[str, Any]) -> str:
        if self.api == "adls":
            return str(obj["etag"]).strip('"')
        md5 = obj.get("md5")
        return "md5:" + base64.b64decode(md5).hex() if md5 else "no-md5"

    def snapshot(self) -> Snapshot:
        """Everything below the table but the job directory and the lock, as said above."""
        out: Snapshot = {}
        history: list[str] = []
        for obj in self.sim.objects(BUCKET, f"{TABLE}/"):
            rel = obj["key"][len(TABLE) + 1:]
            if not rel:
                continue  # the table's own marker (``table/`` on GCS): it holds files anyway
            if rel.startswith("_manifest_committer/history/") and rel.endswith(".json"):
                history.append(rel.rsplit("/", 1)[1])
                continue
            if rel.startswith(("_temporary", "_manifest_committer")):
                continue  # the job's own directory; the committer's (lock, its markers)
            if obj.get("is_dir"):
                out[rel.rstrip("/") + "/"] = "dir"
            elif rel == "_SUCCESS":
                out[rel] = self._whose_success(obj)
            else:
                out[rel] = (obj["size"], self._identity(obj))
        # Directories as readers see them: a flat store's directory exists while anything is
        # stored below it, and its zero-byte marker (``p=1`` on Blob, ``p=1/`` on GCS) adds
        # nothing to that; an empty directory is its marker alone, and stays one.
        files = [k for k, v in out.items() if not k.endswith("/") and v != "dir"]
        for rel in files:
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out["/".join(parts[:i]) + "/"] = "dir"
        for rel in files:
            if out.get(rel + "/") == "dir" and out[rel][0] == 0:
                del out[rel]
        out.pop("/", None)
        out["history"] = sorted(history)
        return out

    def _whose_success(self, obj: Mapping[str, Any]) -> str:
        store = self.store()
        try:
            data = store.read_bytes(f"{self.dest}/_SUCCESS")
        finally:
            store.close()
        return f"_SUCCESS of {orjson.loads(data).get('jobId')} ({obj['size'] > 0})"

    def job_dir_left(self) -> list[str]:
        """What is left of this job's directory and ``_temporary`` above it (nothing, after a
        finished resume or rollback: ``_temporary`` is removed once empty)."""
        return [o["key"] for o in self.sim.objects(BUCKET, f"{TABLE}/_temporary")]

    def half_done(self) -> int:
        """Renames caught between their copy and their source's delete: a task attempt's file
        (``.../tasks/<attempt>/<path>``) and the table's ``<path>`` both there."""
        keys = {o["key"] for o in self.sim.objects(BUCKET, f"{TABLE}/")
                if not o.get("is_dir") and o["size"] > 0}  # files, not directories or markers
        return sum(1 for k in keys if "/tasks/" in k
                   and f"{TABLE}/{k.split('/tasks/', 1)[1].partition('/')[2]}" in keys)

    def committed(self, reference: Snapshot, prepared: Prepared) -> Snapshot:
        """The uninterrupted commit's snapshot, with this run's identities."""
        out: Snapshot = {}
        job_files = {k[len(TABLE) + 1:]: v for k, v in prepared.job.expected.items()}
        for rel, value in reference.items():
            if rel in job_files:
                out[rel] = job_files[rel]
            elif rel in prepared.before and not rel.startswith(REPLACED) and rel not in (
                    "_SUCCESS", "history"):
                out[rel] = prepared.before[rel]
            else:
                out[rel] = value
        return out


def _follow(pid: int | None, pipe: Connection, events: list[tuple[Any, ...]]) -> bool:
    """Collect the child's messages until it ends, killing it where it stopped to be killed.
    True if it was killed."""
    while True:
        try:
            event = pipe.recv()
        except EOFError:
            return False
        events.append(event)
        if event[0] == "armed":
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            return True
        if event[0] in ("done", "failed"):
            return False  # the child's last word


def kill_point(reference: ChildRun, stage: str, rng: random.Random) -> KillPoint:
    """A point drawn uniformly within ``stage`` of the uninterrupted commit: the first progress
    report with that many of its items done (the last report has them all: the point is always
    reached, within the stage); for a stage that reports no progress, the end of the stage
    before it."""
    total = reference.totals().get(stage, 0)
    if total > 0:
        return KillPoint(stage, rng.randrange(total))
    names = [name for name, _ in reference.timeline()]
    return KillPoint(names[names.index(stage) - 1], 0, ended=True)


def describe(point: KillPoint) -> str:
    if point.ended:
        return f"as {point.stage} ended"
    if point.stage is None:
        return f"at progress report {point.done}"
    return f"in {point.stage} with {point.done} done"


def differences(got: Snapshot, want: Snapshot) -> str:
    keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    shown = "; ".join(f"{k}: {got.get(k, '(absent)')} != {want.get(k, '(absent)')}"
                      for k in keys[:5])
    return f"{len(keys)} paths differ: {shown}"


def journal_state(crash: CloudCrash) -> str | None:
    """The state the job's journal records, or ``None`` where there is none."""
    from committer.job.durability.interrupted import interrupted_commits

    store = crash.store()
    try:
        found = [c for c in interrupted_commits(store, crash.dest) if c.job_id == JOB]
        return found[0].state if found and found[0].journal is not None else None
    finally:
        store.close()


def recover(crash: CloudCrash, prepared: Prepared, action: str) -> tuple[str, str]:
    """Run ``action`` (``resume`` or ``rollback``) on whatever the kill left, as a user would
    after reading ``manifest-committer status``; returns ``(the job's state at the kill, the
    state the destination must now be in: "committed" or "before")``.

    A commit killed in ``cleaning`` is complete: rollback refuses it and resume finishes it.
    A job whose commit never wrote its journal (killed before) is committed again by resume
    and aborted by rollback; one killed after its job directory was removed is committed.
    """
    from committer.errors import JobConflictError
    from committer.job import resume, rollback
    from committer.job.durability.history import read_record
    from committer.job.durability.interrupted import interrupted_commits

    config = crash.config()
    store = open_store(crash.dest, config)
    try:
        found = [c for c in interrupted_commits(store, crash.dest) if c.job_id == JOB]
        committed = read_record(store, crash.dest, JOB) is not None
        phase = found[0].state if found else ("committed" if committed else "not_started")
        journal = bool(found) and found[0].journal is not None
        if action == "resume":
            if journal:
                resume(crash.dest, JOB, config=config, store=store)
            else:  # never started, or finished: committing again is what finishes it
                _committer(crash, store).commit(prepared.job.committed)
            return phase, "committed"
        if journal and phase == "cleaning":
            try:
                rollback(crash.dest, JOB, config=config, store=store)
            except JobConflictError as e:
                assert "cannot be rolled back" in str(e), e
            else:
                raise AssertionError("a commit in cleaning was rolled back")
            resume(crash.dest, JOB, config=config, store=store)
            return phase, "committed"
        if found:
            rollback(crash.dest, JOB, config=config, store=store)
            return phase, "before"
        if committed:
            return phase, "committed"
        _committer(crash, store).abort()
        return phase, "before"
    finally:
        store.close()


def _committer(crash: CloudCrash, store: ManagedStore) -> JobCommitter:
    return JobCommitter(crash.dest, JOB, config=crash.config(), store=store,
                        dynamic_partition_overwrite=True)
