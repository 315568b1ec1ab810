"""The latency model: each response waits a lognormal delay, seeded.

A lognormal with median ``m`` and 99th percentile ``p`` has ``mu = ln m`` and
``sigma = ln(p / m) / 2.326`` (2.326 is the standard normal's 99th percentile). Draws come from
a private ``random.Random(seed)``, so a run is reproducible for a given order of requests.

To keep a draw to a few hundred nanoseconds (the normal generators of ``random`` are Python
code), 65,536 delays are drawn at start and each request picks one of them at random: the
delays follow the empirical distribution of that sample, whose median and 99th percentile are
within a percent or two of the model's, and whose largest value is about the model's
99.998th percentile.

A batch request (many sub-requests in one) is answered when the slowest of its sub-requests is
done: its delay is the largest of one draw per sub-request.
"""

from __future__ import annotations

import math
import random
from itertools import repeat

__all__ = ["Z99", "Latency"]

Z99 = 2.3263478740408408  # the standard normal distribution's 99th percentile
_TABLE_BITS = 16


class Latency:
    """Delays in seconds; ``median_ms`` 0 means none."""

    def __init__(self, median_ms: float, p99_ms: float, seed: int | None = None) -> None:
        if median_ms < 0 or p99_ms < 0:
            raise ValueError("latency must not be negative")
        if median_ms > 0 and p99_ms < median_ms:
            raise ValueError(f"p99 ({p99_ms} ms) is below the median ({median_ms} ms)")
        self.median_ms = median_ms
        self.p99_ms = p99_ms
        self.enabled = median_ms > 0
        self._mu = math.log(median_ms / 1000.0) if self.enabled else 0.0
        self._sigma = math.log(p99_ms / median_ms) / Z99 if self.enabled else 0.0
        rng = random.Random(seed)
        self._table: list[float] = []
        if self.enabled and self._sigma > 0.0:
            self._table = [math.exp(self._mu + self._sigma * rng.gauss(0.0, 1.0))
                           for _ in range(1 << _TABLE_BITS)]
        self._pick = rng.getrandbits

    def draw(self) -> float:
        """One delay, in seconds (0.0 when disabled)."""
        if not self.enabled:
            return 0.0
        if not self._table:
            return self.median_ms / 1000.0
        return self._table[self._pick(_TABLE_BITS)]

    def draw_slowest(self, n: int) -> float:
        """The delay of a batch of ``n`` sub-requests: the largest of ``n`` draws."""
        if n <= 1 or not self._table:
            return self.draw()
        # the same draws as n calls of draw(), iterated in C
        return max(map(self._table.__getitem__, map(self._pick, repeat(_TABLE_BITS, n))))

    def describe(self) -> dict[str, float]:
        return {"median_ms": self.median_ms, "p99_ms": self.p99_ms, "sigma": self._sigma}
