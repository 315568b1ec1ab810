"""What every stage is given, and the runner that times, names and wraps each stage.

A stage is a function of a :class:`StageContext` (and its own inputs): the store, the job
attempt's layout, the configuration, the one thread pool of the commit, the number of items a
stage keeps in flight on it, and the progress callback. :class:`StageRunner` runs the stages
of one commit in turn: it records each stage's duration under its statistic and remembers
which stage is running, so a failure can name it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from committer.config import CommitterConfig
from committer.layout import JobLayout
from committer.progress import ProgressCallback, notify
from committer.statistics import IOStatistics
from committer.store.managed import ManagedStore

T = TypeVar("T")
LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageContext:
    store: ManagedStore
    layout: JobLayout
    config: CommitterConfig
    pool: Executor
    progress: ProgressCallback | None = None
    #: the pool's threads (0: ``io_threads``)
    threads: int = 0

    @property
    def workers(self) -> int:
        return self.threads or self.config.io_threads

    @property
    def window(self) -> int:
        """How many items a stage keeps in flight on the pool: enough to keep every worker
        busy while results are collected, few enough that a million items are never a million
        futures."""
        return 2 * self.workers

    def notify(self, stage: str, done: int, total: int) -> None:
        notify(self.progress, stage, done, total)


@contextmanager
def stage_context(store: ManagedStore, layout: JobLayout, config: CommitterConfig,
                  progress: ProgressCallback | None, name: str) -> Iterator[StageContext]:
    """A context with a pool of :func:`pool_threads` workers, shut down (waiting for every
    worker) when the block ends, however it ends (HADOOP-16798)."""
    threads = pool_threads(store, config)
    with ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
        yield StageContext(store, layout, config, pool, progress, threads)


#: the most threads a commit's pool gets beyond ``io_threads`` on a cloud store
MAX_WAITING_THREADS = 256


def pool_threads(store: ManagedStore, config: CommitterConfig) -> int:
    """``io_threads``; on a store whose calls only wait on its request loop (the cloud
    backends), enough threads for an eighth of its concurrency (at most
    ``MAX_WAITING_THREADS``). The bulk stages make one call per item (manifest reads,
    directories, the task directories cleanup deletes): with 32 threads and a service's 30 ms
    mean latency, 1,000 of them took a second each stage, while such a thread costs a wake per
    call, not a CPU."""
    return max(config.io_threads, min(store.calls_at_once() // 8, MAX_WAITING_THREADS))


class StageRunner:
    """Runs stages in order; ``current`` names the stage that is running (or last ran)."""

    def __init__(self, stats: IOStatistics, first: str) -> None:
        self.stats = stats
        self.current = first

    def run(self, name: str, statistic: str | None, work: Callable[[], T]) -> T:
        """``work()`` as stage ``name``, its duration recorded under ``statistic``."""
        self.current = name
        t0 = time.perf_counter()
        result = work()
        took = time.perf_counter() - t0
        if statistic is not None:
            self.stats.timed(statistic, took)
        LOG.debug("stage %s took %.3f s", name, took)
        return result
