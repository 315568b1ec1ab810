"""Virtual time for code that sleeps on threads (``time.monotonic`` and ``time.sleep``
stand-ins), so that a test of pacing or backoff sees the delays it scripted, however busy the
machine: a sleep takes no real time, and time moves only when every thread taking part is
asleep, to the earliest wake-up (so sleeps on several threads overlap as they would).

    clock = VirtualClock(parties=8)   # eight threads take part; each calls clock.done() at its end
    limiter = RateLimiter(200, clock=clock.monotonic, sleep=clock.sleep)
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading

__all__ = ["VirtualClock"]

#: how long a sleeper waits for the other parties before the test is declared stuck
STUCK_S = 120.0


class VirtualClock:
    def __init__(self, parties: int = 1, now: float = 0.0) -> None:
        self.now = now
        self._cond = threading.Condition()
        self._awake = parties  # parties not asleep (nor done)
        self._wakeups: list[tuple[float, int]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        with self._cond:
            return self.now

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        with self._cond:
            # a sleep always moves the time on, if only by the least step a float can take
            # (``now + 1e-18`` is ``now``: a caller waiting out a rounding error never would)
            wake = max(self.now + seconds, math.nextafter(self.now, math.inf))
            heapq.heappush(self._wakeups, (wake, next(self._seq)))
            self._awake -= 1
            self._advance()
            while self.now < wake:
                if not self._cond.wait(STUCK_S):
                    raise RuntimeError("virtual clock: a party never slept nor finished")

    def done(self) -> None:
        """A party's thread is finished (it will sleep no more)."""
        with self._cond:
            self._awake -= 1
            self._advance()

    def _advance(self) -> None:
        if self._awake > 0 or not self._wakeups:
            return
        self.now = max(self.now, self._wakeups[0][0])
        while self._wakeups and self._wakeups[0][0] <= self.now:
            heapq.heappop(self._wakeups)
            self._awake += 1  # counted awake at once: no one else moves the time meanwhile
        self._cond.notify_all()
