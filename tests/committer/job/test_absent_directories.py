"""The directories a commit creates, probed as the manifests naming them load
(``durability/absent_directories.py``): each path once, started by ``note`` before the last
manifest, and what ``result`` returns is every absent one below the roots."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from committer.job.durability.absent_directories import AbsentDirectories, below_root
from committer.job.stages.context import StageContext
from committer.store.base import FileStatus
from committer.store.managed import ManagedStore


class _Meta:
    """A store whose only directories are ``present``; records each ``stat_many`` call."""

    def __init__(self, present: set[str]) -> None:
        self.present = present
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()
        self.asked = threading.Event()

    def stat_many(self, paths: Sequence[str], directories: bool = False
                  ) -> list[FileStatus | None]:
        assert directories  # asked as directories: a flat store asks below each at once
        with self.lock:
            self.calls.append(list(paths))
        self.asked.set()
        return [FileStatus(p, 0, True) if p in self.present else None for p in paths]


class _Ctx:
    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool


def test_directories_are_probed_as_noted_each_once_and_the_absent_ones_returned() -> None:
    meta = _Meta({"abfs://c/t/p=1"})
    with ThreadPoolExecutor(4) as pool:
        probes = AbsentDirectories(cast(ManagedStore, meta), ["abfs://c/t"],
                                   cast(StageContext, _Ctx(pool)))
        probes.note(["abfs://c/t/p=1", "abfs://c/t/p=2/q=3"])
        assert meta.asked.wait(600)  # probed before result() is asked for (a generous wait)
        started = len(meta.calls)
        probes.note(["abfs://c/t/p=2"])  # asked already: nothing new
        absent = probes.result({"abfs://c/t/p=1", "abfs://c/t/p=2/q=3", "abfs://c/t/p=4/"})
    assert started == 1
    asked = [p for call in meta.calls for p in call]
    assert sorted(asked) == sorted(set(asked))  # each path once
    assert absent == ["abfs://c/t/p=2", "abfs://c/t/p=2/q=3", "abfs://c/t/p=4"]


def test_only_what_lies_below_a_root_is_probed() -> None:
    roots = ["abfs://c/t", "abfs://c/custom"]
    assert below_root(roots, "abfs://c/t/a/b/") == ["abfs://c/t/a/b", "abfs://c/t/a"]
    assert below_root(roots, "abfs://c/custom/x") == ["abfs://c/custom/x"]
    assert below_root(roots, "abfs://c/elsewhere/x") == []
    assert below_root(roots, "abfs://c/t") == []
