"""Fault injection, for tests: every way the engine is made to fail on purpose lives here.

``FaultInjectingStore`` is a store that fails on purpose: the same interface, with scripted
trouble.

It sits *under* :class:`ManagedStore`, exactly where a flaky cloud store would, so the retry and
recovery logic under test is the production code. Faults are chosen by operation name and a
probability (seeded, so a failing history can be replayed), or scripted per path:

- ``transient``: raise ``TransientStoreError`` before doing anything (a throttled request);
- ``after``: do the operation, then raise ``TransientStoreError`` (a timeout whose request landed
  anyway: the HADOOP-18012 case);
- ``parent_missing``: a rename reports its destination parent missing once (HADOOP-18242).

``HttpFaults`` goes one level lower, for the cloud backends: plugged into a backend's wire hook
(``_aio.WireFaults``), it answers a fraction of HTTP requests with a throttling status, so the
backend's own error mapping and the managed store's retries are what is tested.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, TypeVar

from committer.errors import PathNotFoundError, TransientStoreError
from committer.store.base import FileStatus, Store

T = TypeVar("T")

OPERATIONS = ("stat", "list_dir", "mkdirs", "rename_file", "replace_file", "delete_file",
              "delete_tree", "read_bytes", "write_bytes", "rename_dir")


@dataclass
class FaultPlan:
    """How often each operation fails, and how."""

    rate: float = 0.0  # probability of a fault per operation
    operations: frozenset[str] = frozenset(OPERATIONS)
    after_rate: float = 0.0  # probability that a rename happens and then "times out"
    seed: int = 0
    # path substrings that fail the next time they are renamed, once each
    parent_missing_once: set[str] = field(default_factory=set)


class FaultInjectingStore(Store):
    def __init__(self, inner: Store, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.name = inner.name
        self.supports_etags = inner.supports_etags
        self.rename_keeps_etag = inner.rename_keeps_etag
        self.renames_directories = inner.renames_directories
        self.account_rate_limited = inner.account_rate_limited
        self._rng = random.Random(plan.seed)
        self._lock = threading.Lock()
        self.injected = 0
        self.enabled = True

    def _roll(self, p: float) -> bool:
        if not self.enabled or p <= 0:
            return False
        with self._lock:
            hit = self._rng.random() < p
            if hit:
                self.injected += 1
            return hit

    def _do(self, op: str, path: str, fn: Callable[[], T]) -> T:
        if op in self.plan.operations and self._roll(self.plan.rate):
            raise TransientStoreError(f"injected fault: {op} {path}", path)
        return fn()

    def stat(self, path: str) -> FileStatus:
        return self._do("stat", path, lambda: self.inner.stat(path))

    def list_dir(self, path: str) -> list[FileStatus]:
        return self._do("list_dir", path, lambda: self.inner.list_dir(path))

    def list_dir_or_empty(self, path: str) -> list[FileStatus]:
        return self._do("list_dir", path, lambda: self.inner.list_dir_or_empty(path))

    def list_names(self, path: str) -> list[str]:
        return self._do("list_dir", path, lambda: self.inner.list_names(path))

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        # through our own list_dir, so listings fail as they would on a real store
        return Store.walk_files(self, root)

    def mkdirs(self, path: str) -> None:
        self._do("mkdirs", path, lambda: self.inner.mkdirs(path))

    def rename_file(self, src: str, dst: str) -> None:
        if self.enabled:
            for marker in list(self.plan.parent_missing_once):
                if marker in dst:
                    self.plan.parent_missing_once.discard(marker)
                    raise PathNotFoundError(f"injected: parent of {dst} not found", dst)
        self._do("rename_file", src, lambda: self.inner.rename_file(src, dst))
        if "rename_file" in self.plan.operations and self._roll(self.plan.after_rate):
            raise TransientStoreError(f"injected timeout after rename: {src}", src)

    def rename_dir(self, src: str, dst: str) -> None:
        self._do("rename_dir", src, lambda: self.inner.rename_dir(src, dst))
        if "rename_dir" in self.plan.operations and self._roll(self.plan.after_rate):
            raise TransientStoreError(f"injected timeout after directory rename: {src}", src)

    def replace_file(self, src: str, dst: str) -> None:
        self._do("replace_file", src, lambda: self.inner.replace_file(src, dst))

    def delete_file(self, path: str) -> bool:
        return self._do("delete_file", path, lambda: self.inner.delete_file(path))

    def delete_tree(self, path: str) -> bool:
        return self._do("delete_tree", path, lambda: self.inner.delete_tree(path))

    def remove_dir_if_empty(self, path: str) -> bool:
        return self._do("delete_tree", path, lambda: self.inner.remove_dir_if_empty(path))

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        return self._do("read_bytes", path, lambda: self.inner.read_bytes(path, limit))

    def open_write(self, path: str) -> BinaryIO:
        return self._do("write_bytes", path, lambda: self.inner.open_write(path))

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        self._do("write_bytes", path,
                 lambda: self.inner.write_bytes(path, data, exclusive=exclusive))


@dataclass
class HttpFaults:
    """Answers a fraction of a backend's HTTP requests with a throttling status before they are
    sent, for tests: the error then takes the same classification and retry path as a real
    503 from the store (the injection sits below the store's error mapping, above the wire).

    ``after_rate`` lets the request happen and *then* fails it, the ambiguous case of a
    timeout whose request landed (HADOOP-18012)."""

    rate: float = 0.0
    after_rate: float = 0.0
    status: int = 503
    seed: int = 0
    operations: frozenset[str] | None = None  # None: every operation

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self.injected = 0
        self.injected_after = 0

    def _roll(self, p: float) -> bool:
        if p <= 0:
            return False
        with self._lock:
            return self._rng.random() < p

    def before(self, op: str) -> bool:
        """True if this request is to be answered with ``status`` instead of being sent."""
        if self.operations is not None and op not in self.operations:
            return False
        hit = self._roll(self.rate)
        if hit:
            with self._lock:
                self.injected += 1
        return hit

    def after(self, op: str) -> bool:
        """True if this (completed) request's answer is to be lost."""
        if self.operations is not None and op not in self.operations:
            return False
        hit = self._roll(self.after_rate)
        if hit:
            with self._lock:
                self.injected_after += 1
        return hit
