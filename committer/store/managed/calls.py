"""The mechanism under every call of the managed store: pacing, timing and retries.

On success an operation costs one backend call and two clock reads; tenacity is only entered
after a transient failure, so the local fast path pays nothing for resilience it did not need.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_random_exponential

from committer import statistics as st
from committer.config import DEFAULT_CLOUD_RATE_LIMIT, CommitterConfig
from committer.errors import PathNotFoundError, StoreError, TransientStoreError
from committer.statistics import Tally
from committer.store.base import FileStatus, Store
from committer.store.rate_limit import RateLimiter

if TYPE_CHECKING:
    from committer.store.fanout import FanOut

T = TypeVar("T")


def _asked_wait(error: BaseException | None, config: CommitterConfig) -> float:
    """The wait a throttled answer asked for (``Retry-After``), bounded by the configured
    longest backoff so that a hostile or confused answer cannot stall a commit for hours."""
    asked = getattr(error, "retry_after", None)
    if not isinstance(asked, int | float) or asked <= 0:
        return 0.0
    return min(float(asked), config.retry_max_delay_ms / 1000.0)


class PacedCalls:
    """A backend, its statistics and its rate limit: how one call, or a batch's worth of
    stats, is paced, timed and retried (what :class:`ManagedStore` is built on)."""

    def __init__(
        self,
        backend: Store,
        config: CommitterConfig | None = None,
        stats: st.IOStatistics | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.backend = backend
        self.config = config or CommitterConfig()
        self.stats = stats or st.IOStatistics()
        if limiter is None and self.rate_limit > 0:
            limiter = RateLimiter(self.rate_limit)
        self.limiter = limiter
        self._fanout: FanOut | None = None
        #: renames still to be handed to ``rename_batch`` before the commit's tail
        #: (``expect_requests``; ``None``: not counting)
        self._before_tail: int | None = None
        self._tail_lock = threading.Lock()

    @property
    def rate_limit(self) -> int:
        """The static cap in operations a second (0: none): ``io.rate.limit`` when set, else
        the default on a store whose service limits requests per account."""
        if self.config.io_rate_limit is not None:
            return self.config.io_rate_limit
        return DEFAULT_CLOUD_RATE_LIMIT if self.backend.account_rate_limited else 0

    def rate_limit_held_s(self) -> float:
        """Wall seconds so far during which some call waited on the static cap."""
        return self.limiter.held_seconds() if self.limiter is not None else 0.0

    def _backed_off(self, statistic: str | None, seconds: float) -> None:
        """Record a wait after a throttled answer (``statistic``: the operation's name)."""
        if seconds > 0:
            self.stats.timed(st.STORE_IO_THROTTLE_BACKOFF, seconds)
            if statistic == st.OP_RENAME:
                self.stats.timed(st.OP_RENAME_THROTTLE_BACKOFF, seconds)

    # -- the mechanism -------------------------------------------------------------------------

    def _retrying(self, statistic: str | None = None) -> Retrying:
        cfg = self.config

        def counted(state: RetryCallState) -> None:
            self.stats.incr(st.STORE_IO_RETRY)
            error = state.outcome.exception() if state.outcome is not None else None
            if isinstance(error, TransientStoreError) and error.throttled:
                sleep = state.next_action.sleep if state.next_action is not None else 0.0
                self._backed_off(statistic, float(sleep))

        # "full jitter": a random wait up to an exponentially growing bound, so clients
        # throttled together do not retry together; never shorter than the service asked
        backoff = wait_random_exponential(
            multiplier=cfg.retry_initial_delay_ms / 1000.0, max=cfg.retry_max_delay_ms / 1000.0)

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            return max(backoff(state), _asked_wait(error, cfg))

        failed = {"refused": 0, "other": 0}

        def stop(state: RetryCallState) -> bool:
            # a refusal (throttled: not done) is the service pacing us; it gets its own,
            # larger budget, so that a store throttled at random does not fail the commit
            error = state.outcome.exception() if state.outcome is not None else None
            throttled = isinstance(error, TransientStoreError) and error.throttled
            failed["refused" if throttled else "other"] += 1
            return (failed["other"] >= cfg.retry_attempts
                    or failed["refused"] >= cfg.retry_throttled_attempts)

        return Retrying(
            stop=stop,
            wait=wait,
            retry=retry_if_exception_type(TransientStoreError),
            before_sleep=counted,
            reraise=True,
        )

    def _honour(self, error: TransientStoreError, statistic: str | None = None) -> None:
        """Before the first retry (which tenacity runs at once): the wait the service asked
        for, if it asked (``Retry-After``)."""
        asked = _asked_wait(error, self.config)
        if asked > 0:
            time.sleep(asked)
            if error.throttled:
                self._backed_off(statistic, asked)

    def _pace(self, statistic: str | None = None) -> None:
        if self.limiter is not None:
            waited = self.limiter.acquire()
            if waited > 0:
                self._rate_limited(statistic, waited)

    def _rate_limited(self, statistic: str | None, waited: float) -> None:
        self.stats.timed(st.STORE_IO_RATE_LIMITED, waited)
        if statistic == st.OP_RENAME:
            self.stats.timed(st.OP_RENAME_RATE_LIMITED, waited)

    def call(self, statistic: str, fn: Callable[[], T]) -> T:
        """Run one store operation with pacing, timing and retries of transient failures."""
        self._pace(statistic)
        t0 = time.perf_counter()
        try:
            result = fn()
        except TransientStoreError as e:
            self.stats.timed(statistic, time.perf_counter() - t0, failed=True)
            self.stats.incr(st.STORE_IO_THROTTLED)
            self._honour(e, statistic)
            for attempt in self._retrying(statistic):
                with attempt:
                    self._pace(statistic)
                    t0 = time.perf_counter()
                    try:
                        result = fn()
                    except TransientStoreError:
                        self.stats.timed(statistic, time.perf_counter() - t0, failed=True)
                        raise
            self.stats.timed(statistic, time.perf_counter() - t0)
            return result
        except StoreError:
            self.stats.timed(statistic, time.perf_counter() - t0, failed=True)
            raise
        self.stats.timed(statistic, time.perf_counter() - t0)
        return result

    def _pace_many(self, n: int, statistic: str | None = None) -> None:
        if self.limiter is None:
            return
        waited, cap = 0.0, max(1, int(self.limiter.rate))
        while n > 0:  # permits beyond one second's burst are taken a second's worth at a time
            take = min(n, cap)
            waited += self.limiter.acquire(take)
            n -= take
        if waited > 0:
            self._rate_limited(statistic, waited)

    def stat(self, path: str) -> FileStatus:
        return self.call(st.OP_GET_FILE_STATUS, lambda: self.backend.stat(path))

    def stat_or_none(self, path: str) -> FileStatus | None:
        try:
            return self.stat(path)
        except PathNotFoundError:
            return None

    def exists(self, path: str, directory: bool = False) -> bool:
        """Whether anything is at ``path``; ``directory``: where a directory is expected, asked
        as ``stat_many`` asks one (on flat object stores its marker and a listing below it at
        once, not one after the other)."""
        if directory:
            return self.stat_many([path], directories=True)[0] is not None
        return self.stat_or_none(path) is not None

    def stat_many(self, paths: Sequence[str], directories: bool = False
                  ) -> list[FileStatus | None]:
        """The status of each of ``paths`` (``None`` where nothing is there), asked at once
        where the backend can (a cloud store's request loop); a path whose call failed
        transiently is asked again alone, with the retries of any other call.
        ``directories``: as ``Store.stat_many``."""
        if not paths:
            return []
        self._pace_many(len(paths))
        t0 = time.perf_counter()
        found = self.backend.stat_many(paths, directories)
        tally = Tally()
        tally.timed_many(st.OP_GET_FILE_STATUS, len(paths), time.perf_counter() - t0)
        self.stats.merge(tally)
        out: list[FileStatus | None] = []
        for path, status in zip(paths, found, strict=True):
            if isinstance(status, TransientStoreError):
                self.stats.incr(st.STORE_IO_THROTTLED)
                out.append(self.stat_or_none(path))
            elif isinstance(status, StoreError):
                raise status
            else:
                out.append(status)
        return out

