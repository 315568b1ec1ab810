"""A token bucket shared by every stage of a commit: store operations per second."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Blocks callers so that at most ``per_second`` permits are handed out each second.

    Burst capacity is one second's worth, so a limit of 1000/s lets 1000 requests go at once
    and then paces the rest. ``acquire`` returns the seconds spent waiting.
    """

    def __init__(self, per_second: int) -> None:
        if per_second <= 0:
            raise ValueError("per_second must be positive")
        self.rate = float(per_second)
        self._tokens = float(per_second)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self, permits: int = 1) -> float:
        waited = 0.0
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= permits:
                    self._tokens -= permits
                    return waited
                delay = (permits - self._tokens) / self.rate
            time.sleep(delay)
            waited += delay
