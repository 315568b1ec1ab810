"""The committing process of the cloud crash test (test harness only): one job commit, resume
or rollback against the simulated account, in a process of its own that the test kills.

Started from a ``multiprocessing`` fork server that has imported this module (so a child costs
a fork, not a Python start and the cloud clients' imports), it sends over its pipe:
``("go", t)`` just before the action starts, ``("stage", name, t)`` as each stage of a commit
ends (``StageRunner``'s log) and the first progress report of every stage (``("begin", name,
t, total)``), then ``("done", t)``, or ``("failed", text)``. Times are ``time.monotonic()``.

Given a :class:`KillPoint`, the child stops where it says (the thread that reached it sends
``("armed", name, done, t)`` and waits for ever) and the test kills it there: where a child
dies is a point in its own work, not a moment of the machine's clock, so however fast or slow
the machine runs, every kill lands, and in the stage it was meant for.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

# what a long-running driver has imported already, in the fork server once
import committer.store.azure
import committer.store.gcs  # noqa: F401
from committer import CommitterConfig
from committer.job import JobCommitter, resume, rollback
from committer.store import open_store

ACTIONS = ("commit", "resume", "rollback")


@dataclass(frozen=True)
class KillPoint:
    """Where a child stops to be killed: at its first progress report of stage ``stage`` with
    ``done`` or more of the stage's items done; with ``ended``, as stage ``stage`` ends; with
    ``stage`` None, at its ``done``-th progress report of any stage (a recovery's)."""

    stage: str | None
    done: int
    ended: bool = False


def stage_label(name: str, seen: set[str]) -> str:
    """A stage's name in a timeline (``seen``: the names so far, updated). A dynamic overwrite
    moves the replaced partitions aside inside a first ``create_directories`` run: that one
    is named ``replace_partitions``, as its progress reports are."""
    if name == "create_directories" and "replace_partitions" not in seen:
        name = "replace_partitions"
    seen.add(name)
    return name


def child_main(pipe: Connection, action: str, dest: str, job_id: str,
               committed: dict[str, str], config: dict[str, Any],
               kill: KillPoint | None = None) -> None:
    """Run ``action`` on the job, reporting its stages over ``pipe``, stopping at ``kill``."""
    assert action in ACTIONS, action
    lock = threading.Lock()  # the stages' threads report on one pipe
    seen: set[str] = set()
    reports = 0

    def send(*message: Any) -> None:
        with lock:
            pipe.send(message)

    def stop_here(name: str, done: int) -> None:
        send("armed", name, done, time.monotonic())
        threading.Event().wait()  # until the test's SIGKILL

    class _Stages(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raw = str(record.args[0]) if record.args else "?"  # type: ignore[index]
            with lock:
                name = stage_label(raw, seen)
            send("stage", raw, time.monotonic())
            if kill is not None and kill.ended and kill.stage == name:
                stop_here(name, 0)

    stage_log = logging.getLogger("committer.job.stages.context")
    stage_log.setLevel(logging.DEBUG)
    stage_log.addHandler(_Stages())

    def progress(stage: str, done: int, total: int) -> None:
        nonlocal reports
        if done == 0:
            send("begin", stage, time.monotonic(), total)
        with lock:
            reports += 1
            count = reports
        if kill is None or kill.ended:
            return
        if (kill.stage is None and count >= kill.done) or (
                kill.stage == stage and done >= kill.done):
            stop_here(stage, done)

    cfg = CommitterConfig(**config)
    store = open_store(dest, cfg)
    try:
        send("go", time.monotonic())
        if action == "commit":
            JobCommitter(dest, job_id, config=cfg, store=store, progress=progress,
                         dynamic_partition_overwrite=True).commit(committed)
        elif action == "resume":
            resume(dest, job_id, config=cfg, store=store, progress=progress)
        else:
            rollback(dest, job_id, config=cfg, store=store, progress=progress)
    except Exception as e:  # reported to the test, which fails with it
        send("failed", f"{type(e).__name__}: {e}")
        return
    finally:
        store.close()
    send("done", time.monotonic())
