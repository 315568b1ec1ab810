"""Running the cloud backends' coroutines: on the filesystem's own event loop, many at once.

adlfs and gcsfs each run one asyncio loop in a daemon thread (fsspec's ``get_loop``). A
synchronous backend call hands a coroutine to that loop and waits; a batch hands it a bounded
worker pool, so hundreds of requests are in flight on one thread instead of one thread per
request. Workers pull from the batch in order, so memory is proportional to the concurrency,
not to the batch size (a 100,000-file commit creates ``limit`` coroutines, not 100,000).
"""

from __future__ import annotations

import asyncio
import io
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fsspec.asyn import sync

T = TypeVar("T")
X = TypeVar("X")


def run(loop: asyncio.AbstractEventLoop, fn: Callable[..., Coroutine[Any, Any, T]],
        *args: Any) -> T:
    """Run ``fn(*args)`` on ``loop`` (another thread's) and return its result."""
    result: T = sync(loop, fn, *args)
    return result


async def map_bounded(
    fn: Callable[[X], Awaitable[None]], items: Sequence[X], limit: int
) -> list[BaseException | None]:
    """Apply ``fn`` to every item with at most ``limit`` in flight; one result per item, in
    order: ``None`` for success, else the exception (a failure never stops the others)."""
    results: list[BaseException | None] = [None] * len(items)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(items):
            i = next_index
            next_index += 1  # no await between the check and the increment: no race
            try:
                await fn(items[i])
            except Exception as e:
                results[i] = e

    workers = max(1, min(limit, len(items)))
    await asyncio.gather(*(worker() for _ in range(workers)))
    return results


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


class UploadOnClose(io.BytesIO):
    """A writable binary stream whose content is stored as one object when it is closed.

    Object stores have no open-append-close files; task output written through
    ``Store.open_write`` is gathered in memory and uploaded by ``upload`` at ``close()`` (one
    request, so a reader never sees part of it). Not for outputs larger than memory."""

    def __init__(self, upload: Callable[[bytes], None]) -> None:
        super().__init__()
        self._upload: Callable[[bytes], None] | None = upload

    def close(self) -> None:
        upload, self._upload = self._upload, None
        if upload is not None and not self.closed:
            try:
                upload(self.getvalue())
            finally:
                super().close()
            return
        super().close()
