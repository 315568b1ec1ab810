"""The account throttle: a token bucket.

``rate`` tokens per second flow into a bucket holding at most ``capacity`` (rate x burst
seconds); it starts full. A data request takes one token, a batch one per sub-request, all or
nothing. A request that finds too few is not carried out and is told when to come back:
``Retry-After`` in whole seconds (HTTP allows no fractions), at least 1, rounded up from the
time until the bucket holds the tokens it needs. A request needing more tokens than the
bucket can hold is served when the bucket is full, which leaves it in debt (negative), so its
cost is still paid at the account's rate.
"""

from __future__ import annotations

import math

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(self, rate: float, burst_s: float, now: float) -> None:
        if rate <= 0:
            raise ValueError("the throttle's rate must be positive")
        if burst_s <= 0:
            raise ValueError("the throttle's burst must be positive")
        self.rate = float(rate)
        self.capacity = self.rate * burst_s
        self.tokens = self.capacity
        self._last = now

    def _refill(self, now: float) -> None:
        if now > self._last:
            self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.rate)
            self._last = now

    def take(self, n: int, now: float) -> bool:
        """Take ``n`` tokens if the bucket holds them (or is full, for ``n`` above its
        capacity)."""
        self._refill(now)
        need = min(float(n), self.capacity)
        if self.tokens >= need:
            self.tokens -= n
            return True
        return False

    def wait_s(self, n: int, now: float) -> float:
        """Seconds until ``n`` tokens (at most the capacity) are there."""
        self._refill(now)
        missing = min(float(n), self.capacity) - self.tokens
        return max(0.0, missing / self.rate)

    def retry_after(self, n: int, now: float) -> int:
        """The ``Retry-After`` value, whole seconds, at least 1."""
        return max(1, math.ceil(self.wait_s(n, now)))
