"""What every stage is given, and the runner that times, names and wraps each stage.

A stage is a function of a :class:`StageContext` (and its own inputs): the store, the job
attempt's layout, the configuration, the one thread pool of the commit, the number of items a
stage keeps in flight on it, and the progress callback. :class:`StageRunner` runs the stages
of one commit in turn: it records each stage's duration under its statistic and remembers
which stage is running, so a failure can name it.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class StageContext:
    store: ManagedStore
    layout: JobLayout
    config: CommitterConfig
    pool: Executor
    progress: ProgressCallback | None = None

    @property
    def window(self) -> int:
        """How many items a stage keeps in flight on the pool: enough to keep every worker
        busy while results are collected, few enough that a million items are never a million
        futures."""
        return 2 * self.config.io_threads

    def notify(self, stage: str, done: int, total: int) -> None:
        notify(self.progress, stage, done, total)


@contextmanager
def stage_context(store: ManagedStore, layout: JobLayout, config: CommitterConfig,
                  progress: ProgressCallback | None, name: str) -> Iterator[StageContext]:
    """A context with a pool of ``io_threads`` workers, shut down (waiting for every worker)
    when the block ends, however it ends (HADOOP-16798)."""
    with ThreadPoolExecutor(config.io_threads, thread_name_prefix=name) as pool:
        yield StageContext(store, layout, config, pool, progress)


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
        if statistic is not None:
            self.stats.timed(statistic, time.perf_counter() - t0)
        return result
