"""A token bucket shared by every stage of a commit: store operations per second."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Blocks callers so that at most ``per_second`` permits are handed out each second.

    Burst capacity is one second's worth, so a limit of 1000/s lets 1000 requests go at once
    and then paces the rest. ``acquire`` returns the seconds spent waiting;
    :meth:`held_seconds` the wall time during which at least one caller waited, which is
    what the cap cost a stage (the callers' own waits overlap, and add up to more).
    ``clock`` and ``sleep`` are the time it follows (a test's virtual time replaces them).
    """

    def __init__(self, per_second: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if per_second <= 0:
            raise ValueError("per_second must be positive")
        self.rate = float(per_second)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(per_second)
        self._last = clock()
        self._lock = threading.Lock()
        self._waiting = 0  # callers waiting now, since _held_since
        self._held_since = 0.0
        self._held = 0.0  # closed intervals with a caller waiting, in seconds

    def acquire(self, permits: int = 1) -> float:
        """Take ``permits``, waiting as long as it takes; returns the seconds waited (measured:
        a sleep overruns what it asked for)."""
        queued = False
        since = 0.0
        try:
            while True:
                with self._lock:
                    now = self._clock()
                    self._tokens = min(self.rate,
                                       self._tokens + (now - self._last) * self.rate)
                    self._last = now
                    if self._tokens >= permits:
                        self._tokens -= permits
                        return now - since if queued else 0.0
                    if not queued:
                        queued, since = True, now
                        if self._waiting == 0:
                            self._held_since = now
                        self._waiting += 1
                    delay = (permits - self._tokens) / self.rate
                self._sleep(delay)
        finally:
            if queued:
                with self._lock:
                    self._waiting -= 1
                    if self._waiting == 0:
                        self._held += self._clock() - self._held_since

    def held_seconds(self) -> float:
        """Seconds, since this limiter was made, during which some caller waited for it."""
        with self._lock:
            open_s = self._clock() - self._held_since if self._waiting else 0.0
            return self._held + open_s
