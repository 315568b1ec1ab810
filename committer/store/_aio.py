"""Running the cloud backends' coroutines: on the request loop, many at once.

The cloud backends send their requests on one event loop in a daemon thread
(``http/loop.py``: uvloop when installed). A synchronous backend call hands a coroutine to that
loop and waits; a batch hands it a bounded worker pool, so hundreds of requests are in flight
on one thread instead of one thread per request. Workers pull from the batch in order, so
memory is proportional to the concurrency, not to the batch size (a 100,000-file commit creates
``limit`` coroutines, not 100,000).

The connection pools (and any client with an async ``close()``) a store opens on that loop are
registered with its :class:`AsyncResources` and closed exactly once: by ``close()``, or when the
store is garbage collected, or at interpreter exit, whichever comes first, so no connection
outlives its store.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import random
import threading
import weakref
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, BinaryIO, Protocol, TypeVar

from committer import statistics as st
from committer.errors import PathNotFoundError, StoreError, TransientStoreError
from committer.store.base import FileStatus, Identity, Store, UploadOnClose
from committer.store.http import loop as _loop
from committer.store.http.hedge import Hedger
from committer.store.http.limiter import AdaptiveLimit, begin_unit

T = TypeVar("T")
X = TypeVar("X")
R = TypeVar("R")

#: how long closing a store waits for its loop (a wedged loop must not hang the caller)
CLOSE_TIMEOUT_S = 10.0
#: requests a commit expects up to which it is one of round trips (``expect_requests``)
SMALL_COMMIT = 50_000
#: renames up to which a copy-based store renames each file alone, its source deleted as soon
#: as its copy is done, and deletes objects one request each (above, deletes go in batches: a
#: request a file costs more CPU than the round trip it saves; docs/benchmarks-cloud.md); and
#: objects up to which a flat store deletes a tree one request each, whatever the commit's
#: size (the job directory after a commit holds its manifests: a batch of them waited for its
#: slowest part: 0.48 s in a traced run of 10,000 renames). Only while the service is not
#: strained as a whole (``http/strain.py``): refusing, or slowed under load, it gets batches
#: (more requests there only queue, and cost the client CPU a batch saves)
ONE_BY_ONE = 2_000
#: rounds in which a batch of renames sends again the sources' deletes the service refused,
#: and the longest wait before one (a hostile Retry-After cannot stall the batch for long)
SOURCE_DELETE_ROUNDS = 3
SOURCE_DELETE_MAX_WAIT_S = 10.0


def run(loop: asyncio.AbstractEventLoop, fn: Callable[..., Coroutine[Any, Any, T]],
        *args: Any) -> T:
    """Run ``fn(*args)`` on ``loop`` (another thread's) and return its result."""
    return _loop.run(loop, fn, *args)


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


async def _as_unit(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``fn(*args)`` as one unit of work of the store's limit (``limiter.begin_unit``): a
    batch's requests wait for places after those of batches begun before it."""
    begin_unit()
    return await fn(*args)


async def beside(first: Awaitable[T], second: Awaitable[R]) -> tuple[T, R | BaseException]:
    """Both at once (one round trip where the second is usually needed after the first):
    ``first``'s failure raised, ``second``'s returned, for the caller that needs its answer."""
    a, b = await asyncio.gather(first, second, return_exceptions=True)
    if isinstance(a, BaseException):
        raise a
    return a, b


def flag_option(value: Any, name: str) -> bool | None:
    """A boolean storage option (or header) given as a bool or as text ("true"/"false", any
    case; Spark and Hadoop configurations carry text): ``bool("false")`` would be True."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    from committer.errors import ConfigError

    raise ConfigError(f"{name}: expected true or false, got {value!r}")


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class AsyncResources:
    """Connection pools (anything with an async ``close()``) one store opened on its event
    loop; closed in the reverse order of opening, each once.

    ``close()`` waits for the loop (from any other thread); ``close_soon()`` only schedules the
    close, for finalizers, which may run on any thread, the loop's own included. Resources still
    open at interpreter exit are closed by an ``atexit`` hook while the loop's thread (a daemon)
    still runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: list[Any] = []
        self._lock = threading.Lock()

    def add(self, item: R) -> R:
        with self._lock:
            self._items.append(item)
            _OPEN.add(self)
        return item

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[Any]:
        """What is open now, in the order it was opened."""
        with self._lock:
            return list(self._items)

    def _take(self) -> list[Any]:
        with self._lock:
            items, self._items = self._items[::-1], []
            _OPEN.discard(self)
        return items

    async def aclose(self) -> None:
        for item in self._take():
            # closing is best effort: a client whose connection broke must not keep the rest
            # of the resources open
            with contextlib.suppress(Exception):
                await item.close()

    def close_soon(self) -> None:
        """Schedule the close on the loop without waiting (for finalizers)."""
        if not self._items:
            return
        loop = self._loop
        if loop.is_closed() or not loop.is_running():
            self._take()  # nothing can close them any more; forget them
            return
        future = asyncio.run_coroutine_threadsafe(self.aclose(), loop)
        _PENDING.add(future)
        future.add_done_callback(_PENDING.discard)

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Close everything now and wait (bounded) for it to be done."""
        if not self._items:
            return
        if _on_loop_thread(self._loop) or not self._loop.is_running():
            self.close_soon()
            return
        future = asyncio.run_coroutine_threadsafe(self.aclose(), self._loop)
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            future.result(timeout)


_OPEN: set[AsyncResources] = set()  # resources with something open, for the exit hook
_PENDING: set[concurrent.futures.Future[None]] = set()  # closes scheduled by finalizers


@atexit.register
def _close_at_exit() -> None:
    for resources in list(_OPEN):
        resources.close_soon()
    # one bounded wait for all of them: a wedged loop must not hold up the exit for long
    concurrent.futures.wait(list(_PENDING), timeout=CLOSE_TIMEOUT_S)


class WireFaults(Protocol):
    """The one place a cloud backend lets faults in: asked before each HTTP request is sent
    and after its answer came, it says whether to answer with ``status`` instead (a
    throttled request; an answer lost after the request landed). The backend raises its own
    error for it, so the error takes the same classification and retry path as a real one.
    The implementation that decides, for tests, is ``committer.store.faults.HttpFaults``."""

    status: int

    def before(self, op: str) -> bool: ...

    def after(self, op: str) -> bool: ...


class AsyncStore(Store):
    """A store whose operations are coroutines on one event loop (the request loop).

    The synchronous interface the engine calls is written once, here: each call runs the
    backend's coroutine on ``_loop`` and maps a foreign exception through ``_classify``.
    Backends supply the coroutines and the classifier; they override a method here only where
    their store differs (Azure walks a hierarchical namespace as a tree).
    """

    native_batches = True
    #: renamed sources' deletes sent again after the service refused them (statistics)
    source_deletes_sent_again = 0
    _loop: asyncio.AbstractEventLoop
    _resources: AsyncResources
    #: the backend's adaptive limit of requests in flight, and its races (``http/``)
    _limit: AdaptiveLimit
    _hedger: Hedger
    #: the hedger's counts already taken into statistics (``take_request_counters``)
    _requests_taken: tuple[int, int, int, int] = (0, 0, 0, 0)
    concurrency: int = 256

    def calls_at_once(self) -> int:
        return self.concurrency

    #: a small commit's renames, copies and batches of deletes are raced in their latency tail
    #: (``http/hedge.py``); set by :meth:`expect_requests`
    _race_tail = False
    #: a large commit's last renames are raced likewise, grouped as the rest (``tail_begins``)
    _race_last = False
    #: a commit small enough that a copy-based store renames each file alone and deletes
    #: without batches (``ONE_BY_ONE``), while the service is not strained; set likewise
    _one_by_one = False

    @property
    def _each_alone(self) -> bool:
        """Whether files are renamed and deleted one request each now: a small commit's
        (``ONE_BY_ONE``), while the service is neither refusing nor slowed as a whole
        (``AdaptiveLimit.strained``); else in batches, which send and wait for fewer
        requests."""
        return self._one_by_one and not self._limit.strained

    def _tree_one_by_one(self, objects: int) -> bool:
        """Whether a flat store deletes a tree of ``objects`` objects one request each, raced
        in their tail (``ONE_BY_ONE``), whatever the commit's size: while the service is not
        strained."""
        return objects <= ONE_BY_ONE and not self._limit.strained

    def commit_begins(self) -> None:
        run(self._loop, self._begin)

    async def _begin(self) -> None:
        self._hedger.begin()
        self._requests_taken = (0, 0, 0, 0)

    def take_request_counters(self) -> dict[str, int]:
        return run(self._loop, self._take_requests)

    async def _take_requests(self) -> dict[str, int]:
        """On the loop's thread, which alone changes the hedger's counts."""
        hedger = self._hedger
        now = (hedger.sent + hedger.hedged, hedger.hedged, hedger.won, hedger.wasted)
        before, self._requests_taken = self._requests_taken, now
        names = (st.STORE_IO_REQUEST, st.STORE_IO_REQUEST_RACED, st.STORE_IO_REQUEST_RACE_WON,
                 st.STORE_IO_REQUEST_RACE_WASTED)
        return {name: b - a for name, a, b in zip(names, before, now, strict=True)}

    def expect_requests(self, requests: int) -> None:
        """Up to ``SMALL_COMMIT`` requests, a commit of round trips, not of the account's
        rate: the adaptive limit starts at their number, and the tail is raced. Above, neither:
        a larger commit's slow start is a second of its many, and a race costs CPU on every
        request it may cover (a task and a timer each: at a million Data Lake renames, 1.7x the
        engine's CPU, and a tenth more requests at a rate cap that leaves places free)."""
        small = requests <= SMALL_COMMIT
        self._race_tail = small
        self._race_last = False
        self._one_by_one = requests <= ONE_BY_ONE
        limit = getattr(self, "limit", None)  # the backends' AdaptiveLimit, on the loop
        if small and isinstance(limit, AdaptiveLimit) and getattr(self, "_loop", None) is not None:
            self._loop.call_soon_threadsafe(limit.expect, requests)

    def tail_begins(self) -> None:
        # a large commit's last renames: their far tail is what its stage waits for at the
        # end (one Data Lake rename of 100,000 drew 1.2 s, the account otherwise idle). They
        # keep the large commit's grouping (GCS rewrites in batches): only what is sent alone
        # anyway, and batches of deletes, are raced.
        self._race_last = True

    @property
    def _races(self) -> bool:
        """Whether renames, copies and batches of deletes are raced in their latency tail:
        a small commit's, or a large commit's last."""
        return self._race_tail or self._race_last

    @property
    def _batch_workers(self) -> int:
        """Coroutines one batch runs at once: a quarter of the store's concurrency (the engine
        runs many batches at once, and the store's adaptive limit, not this, bounds the
        requests in flight), so that a batch is not a thousand coroutines asleep at once."""
        return max(64, self.concurrency // 4)

    def _init_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind the store to ``loop``; its resources are closed when it is collected."""
        self._loop = loop
        self._resources = AsyncResources(loop)
        finalizer = weakref.finalize(self, self._resources.close_soon)
        finalizer.atexit = False  # the module's exit hook closes (and waits) instead

    @property
    def open_resources(self) -> int:
        """How many connection pools this store holds open (0 after ``close()``)."""
        return len(self._resources)

    @property
    def resources(self) -> list[Any]:
        """The connection pools this store holds open (for tests and diagnostics)."""
        return self._resources.items()

    async def _delete_sources(
        self, sources: Sequence[X],
        delete_many: Callable[[Sequence[X]], Awaitable[list[BaseException | None]]],
    ) -> list[BaseException | None]:
        """The deletes of renamed sources whose copy is done (``delete_many``: one result per
        source). Those the service refused (throttled: not done) are sent again here, after
        the wait it asked for, up to ``SOURCE_DELETE_ROUNDS`` times: failed to the managed
        store, the whole rename would be sent again, find its own copy at the destination and
        have to prove it the source's (two reads) before the delete. A ``delete_many`` that
        fails as a whole, with any error, fails each of its sources: none is known deleted,
        so none of their renames may count as done."""
        async def delete(batch: Sequence[X]) -> list[BaseException | None]:
            try:
                return await delete_many(batch)
            except Exception as e:
                return [e] * len(batch)

        results = await delete(sources)
        for attempt in range(SOURCE_DELETE_ROUNDS):
            refused: list[int] = []
            wait = 0.0
            for k, error in enumerate(results):
                if isinstance(error, Exception):
                    known = error if isinstance(error, StoreError) else self._classify(error, "")
                    if isinstance(known, TransientStoreError) and known.throttled:
                        refused.append(k)
                        wait = max(wait, known.retry_after or 0.0)
            if not refused:
                break
            self.source_deletes_sent_again += len(refused)
            backoff = random.uniform(0.0, 0.05 * 2 ** attempt)
            await asyncio.sleep(min(max(wait, backoff), SOURCE_DELETE_MAX_WAIT_S))
            again = await delete([sources[k] for k in refused])
            for k, error in zip(refused, again, strict=True):
                results[k] = error
        return results

    async def _delete_taking_along(
        self, source: X, held: list[tuple[int, X]],
        delete_each: Callable[[Sequence[X]], Awaitable[list[BaseException | None]]],
    ) -> tuple[BaseException | None, list[tuple[int, BaseException | None]]]:
        """The delete of a renamed source sent alone, with the sources ``held`` (index,
        source) while the service was strained, their deletes not sent yet: a burst that
        slowed it for a moment must not leave them for the end. ``held`` is emptied; returns
        the source's error and each held source's (by its index)."""
        late = held[:]
        del held[:]
        errors = await self._delete_sources([source, *(s for _, s in late)], delete_each)
        return errors[0], [(j, e) for (j, _), e in zip(late, errors[1:], strict=True)]

    @abstractmethod
    def _classify(self, error: Exception, path: str) -> StoreError:
        """The engine's error family for a foreign exception, its text scrubbed of secrets."""

    @abstractmethod
    async def _stat(self, path: str, directory: bool = False) -> FileStatus:
        """The status at ``path``; ``directory``: the caller expects a directory (a flat
        store asks what is below it at once, not after finding no object)."""

    @abstractmethod
    async def _list(self, path: str, must_exist: bool = True) -> list[FileStatus]:
        """``list_dir``; ``must_exist`` false: ``list_dir_or_empty``."""

    @abstractmethod
    async def _child_sizes(self, path: str) -> dict[str, int | None]:
        """``Store.child_sizes`` from one listing, without a status per child."""

    @abstractmethod
    async def _walk(self, root: str) -> list[FileStatus]: ...

    @abstractmethod
    async def _read(self, path: str, limit: int | None) -> bytes: ...

    @abstractmethod
    async def _write(self, path: str, data: bytes, exclusive: bool) -> None: ...

    @abstractmethod
    async def _mkdirs(self, path: str) -> None: ...

    @abstractmethod
    async def _rename(self, pair: tuple[str, str], replace: bool = False) -> None: ...

    @abstractmethod
    async def _rename_batch(
        self, pairs: Sequence[tuple[str, str]], identities: Sequence[Identity] = ()
    ) -> list[BaseException | None]:
        """``identities``: each pair's recorded ``(size, etag)``, where the caller has them
        (what may prove a rename done, as ``Store.proves_rename`` does)."""

    @abstractmethod
    async def _delete_file(self, path: str) -> bool: ...

    @abstractmethod
    async def _delete_tree(self, path: str) -> bool: ...

    def _do(self, path: str, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        try:
            return run(self._loop, fn, *args)
        except StoreError:
            raise
        except Exception as e:
            # from None: an SDK's exception may carry a signed URL; the scrubbed text is kept
            raise self._classify(e, path) from None

    def stat(self, path: str) -> FileStatus:
        return self._do(path, self._stat, path)

    def stat_many(self, paths: Sequence[str], directories: bool = False
                  ) -> list[FileStatus | StoreError | None]:
        out: list[FileStatus | StoreError | None] = [None] * len(paths)

        async def one(i: int) -> None:
            with contextlib.suppress(PathNotFoundError):
                out[i] = await self._stat(paths[i], directories)

        failed = run(self._loop, map_bounded, one, range(len(paths)), self._batch_workers)
        for i, error in enumerate(failed):
            if isinstance(error, StoreError):
                out[i] = error
            elif isinstance(error, Exception):
                out[i] = self._classify(error, paths[i])
            elif error is not None:
                out[i] = StoreError(f"stat {paths[i]} failed: {error!r}", paths[i])
        return out

    def list_dir(self, path: str) -> list[FileStatus]:
        return self._do(path, self._list, path)

    def list_dir_or_empty(self, path: str) -> list[FileStatus]:
        return self._do(path, self._list, path, False)

    def child_sizes(self, path: str) -> dict[str, int | None]:
        return self._do(path, self._child_sizes, path)

    def list_names(self, path: str) -> list[str]:
        return list(self.child_sizes(path))

    def count_children(self, path: str) -> int:
        return len(self.child_sizes(path))

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        # Object stores are flat: one paged listing of the prefix returns every file below it,
        # where a tree walk would cost a request per (virtual) directory.
        yield from self._do(root, self._walk, root)

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        return self._do(path, self._read, path, limit)

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        self._do(path, self._write, path, data, exclusive)

    def open_write(self, path: str) -> BinaryIO:
        # The stream uploads through write_bytes at close, with this store's credentials (the
        # base class's fsspec.open would build a filesystem without them).
        return UploadOnClose(lambda data: self.write_bytes(path, data))

    def mkdirs(self, path: str) -> None:
        self._do(path, self._mkdirs, path)

    def rename_file(self, src: str, dst: str) -> None:
        self._do(f"{src} -> {dst}", self._rename, (src, dst))

    def replace_file(self, src: str, dst: str) -> None:
        self._do(f"{src} -> {dst}", self._rename, (src, dst), True)

    def rename_batch(self, entries: Sequence[tuple[str, str, Any, Any]],
                     start: int = 0) -> tuple[int, list[tuple[int, StoreError]]]:
        pairs = [(e[0], e[1]) for e in entries[start:]]
        # what proves a rename done, to race its tail by (a small commit's only)
        identities = [(e[2], e[3]) for e in entries[start:]] if self._races else []
        results = run(self._loop, _as_unit, self._rename_batch, pairs, identities)
        failures = [(start + k, self._as_store_error(r, pairs[k]))
                    for k, r in enumerate(results) if r is not None]
        return len(entries), failures

    def _as_store_error(self, error: BaseException, pair: tuple[str, str]) -> StoreError:
        if isinstance(error, StoreError):
            return error
        if isinstance(error, Exception):
            return self._classify(error, f"{pair[0]} -> {pair[1]}")
        return StoreError(f"rename {pair[0]} -> {pair[1]} failed: {error!r}", pair[0])

    def delete_file(self, path: str) -> bool:
        return self._do(path, self._delete_file, path)

    def delete_tree(self, path: str) -> bool:
        return self._do(path, self._delete_tree, path)

    def close(self) -> None:
        """Close the sessions and clients this store opened (it opens new ones if used again)."""
        self._resources.close()
