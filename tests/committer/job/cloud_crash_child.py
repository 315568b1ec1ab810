"""The committing process of the cloud crash test (test harness only): one job commit, resume
or rollback against the simulated account, in a process of its own that the test kills.

Started from a ``multiprocessing`` fork server that has imported this module (so a child costs
a fork, not a Python start and the cloud clients' imports), it sends over its pipe:
``("go", t)`` just before the action starts, ``("stage", name, t)`` as each stage of a commit
ends (``StageRunner``'s log) and the first progress report of every stage (``("begin", name,
t)``), then ``("done", t)``, or ``("failed", text)``. Times are ``time.monotonic()``.
"""

from __future__ import annotations

import logging
import os
import time
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


def child_main(pipe: Connection, action: str, dest: str, job_id: str,
               committed: dict[str, str], config: dict[str, Any]) -> None:
    """Run ``action`` on the job, reporting its stages over ``pipe``."""
    assert action in ACTIONS, action

    class _Stages(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pipe.send(("stage", str(record.args[0]) if record.args else "?",  # type: ignore[index]
                       time.monotonic()))

    stage_log = logging.getLogger("committer.job.stages.context")
    stage_log.setLevel(logging.DEBUG)
    stage_log.addHandler(_Stages())

    def progress(stage: str, done: int, _total: int) -> None:
        if done == 0:
            pipe.send(("begin", stage, time.monotonic()))

    cfg = CommitterConfig(**config)
    store = open_store(dest, cfg)
    try:
        pipe.send(("go", time.monotonic()))
        if action == "commit":
            JobCommitter(dest, job_id, config=cfg, store=store, progress=progress,
                         dynamic_partition_overwrite=True).commit(committed)
        elif action == "resume":
            resume(dest, job_id, config=cfg, store=store, progress=progress)
        else:
            rollback(dest, job_id, config=cfg, store=store, progress=progress)
    except Exception as e:  # reported to the test, which fails with it
        pipe.send(("failed", f"{type(e).__name__}: {e}"))
        return
    finally:
        store.close()
    pipe.send(("done", time.monotonic()))
