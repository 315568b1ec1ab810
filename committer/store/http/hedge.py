"""Hedged requests: a second copy of a slow idempotent request, the first answer taken.

A commit's fixed phases (reading the manifests, probing and creating the directories) each
end with their slowest request, and a storage service's latency has a long tail: one request
of a hundred waits ten times the median. Sending a copy of a request that has waited longer
than most (the recent 95th percentile of its kind) and taking whichever answers first cuts
that tail to about the percentile plus a median, for a few percent more requests ("The Tail
at Scale", Dean and Barroso, 2013). Measured on the simulated account: ``docs/stores.md``.

Only requests whose repetition changes nothing are hedged: reads (``GET``, ``HEAD``) and
those a backend marks so (a directory create that accepts "already there"). A copy is sent
only while the adaptive limit has a place free, and copies stay under :data:`SHARE` of the
requests (beyond the first :data:`BURST`), so under throttling hedging stops by itself; a
request refused a copy so tries again each time it has waited as long again (the far tail of a
phase's last requests, which the share used up earlier would leave alone, is what the phase
waits for). The loser is cancelled (its connection closed).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine
from typing import Any

from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.messages import Response

__all__ = ["Hedger", "hedged"]

READS = frozenset({"GET", "HEAD"})

#: at most this share of the requests are copies, beyond the first few
SHARE = 0.10  # twice what the percentile sends: it binds only when the tail grows
BURST = 10
#: the latency percentile after which a copy is sent
QUANTILE = 0.95
#: latencies kept to estimate it, and how often it is computed again (answers)
SAMPLES = 512
REFRESH = 64
#: no estimate before this many answers; no copy sooner than this (seconds)
MIN_SAMPLES = 64
FLOOR_S = 0.002


def hedged(method: str, hedge: bool | None) -> bool:
    """Whether a request may be raced by a copy: as its sender says (``hedge``), else if it
    is a read."""
    return hedge if hedge is not None else method in READS


class Hedger:
    """When to send a copy of a hedgeable request, and the race between the two."""

    def __init__(self, limit: AdaptiveLimit) -> None:
        self._limit = limit
        self._samples: collections.deque[float] = collections.deque(maxlen=SAMPLES)
        self._fresh = 0
        #: seconds a request waits before its copy is sent (``None``: not known yet)
        self.delay: float | None = None
        #: hedgeable requests, copies sent, and copies that answered first (statistics)
        self.requests = 0
        self.hedged = 0
        self.won = 0

    def _observe(self, seconds: float) -> None:
        self._samples.append(seconds)
        self._fresh += 1
        if self._fresh >= REFRESH and len(self._samples) >= MIN_SAMPLES:
            self._fresh = 0
            ordered = sorted(self._samples)
            self.delay = max(FLOOR_S, ordered[int(QUANTILE * (len(ordered) - 1))])

    async def request(self, send: Callable[[], Coroutine[Any, Any, Response]],
                      throttled: Callable[[Response], bool]) -> Response:
        """``send()``'s answer, or its copy's if that comes first. The caller holds a place
        in the limit for the first; a copy takes one of its own (``throttled`` says whether
        the copy's answer was a refusal, for the limit)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.requests += 1
        delay = self.delay
        if delay is None:
            response = await send()
            self._observe(loop.time() - start)
            return response
        first = loop.create_task(send())
        try:
            while True:  # a copy refused (no share left, no place free) is tried again later
                done, _ = await asyncio.wait((first,), timeout=delay)
                if done:
                    response = await first
                    self._observe(loop.time() - start)
                    return response
                epoch = None if self.hedged >= SHARE * self.requests + BURST \
                    else self._limit.try_acquire()
                if epoch is not None:
                    break
        except asyncio.CancelledError:
            first.cancel()
            raise
        self.hedged += 1
        second = loop.create_task(send())
        try:
            winner = await _first_answer(first, second)
        finally:
            for task in (first, second):
                if not task.done():
                    task.cancel()
            await asyncio.wait((first, second))
            for task in (first, second):  # the loser's failure is retrieved, not logged
                if not task.cancelled():
                    task.exception()
            copy = second.result() if not second.cancelled() and second.exception() is None \
                else None
            self._limit.release(epoch, copy is not None and throttled(copy))
        self.won += winner is second
        # at least the delay, so still a sample of the tail the percentile is taken from
        self._observe(loop.time() - start)
        return winner.result()


async def _first_answer(first: asyncio.Task[Response],
                        second: asyncio.Task[Response]) -> asyncio.Task[Response]:
    """The task that answered first; one that failed counts only if the other fails too."""
    pending = {first, second}
    failed: asyncio.Task[Response] | None = None
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in (first, second):  # the first's answer wins a tie
            if task in done and task.exception() is None:
                return task
        failed = failed or next(iter(done))
    assert failed is not None
    return failed
