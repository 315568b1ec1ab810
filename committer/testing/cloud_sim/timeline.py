"""Per-100 ms statistics since the last reset: what arrived, what was answered, how much was
in flight.

Each bucket counts HTTP requests and *operations* (a batch is one request and one operation per
sub-request) apart: arrivals, responses sent, throttled, lost, and the maximum and the
time-weighted mean number in flight (arrived, response not yet sent). Events come in time
order from the one event loop; a bucket closes when the first event of a later one arrives (or
when the timeline is read), and quiet buckets in between are recorded as zeros.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["BUCKET_S", "Timeline"]

BUCKET_S = 0.1
_MAX_BUCKETS = 36_000  # one hour; older buckets are dropped


class Timeline:
    def __init__(self, now: float) -> None:
        self.buckets: deque[dict[str, Any]] = deque(maxlen=_MAX_BUCKETS)
        self.dropped = 0
        self._t0 = now
        self.in_flight = 0  # requests
        self.in_flight_ops = 0
        self._open(now, 0)

    def reset(self, now: float) -> None:
        """A new measurement window; what is in flight now stays in flight."""
        self.buckets.clear()
        self.dropped = 0
        self._t0 = now
        self._open(now, 0)

    def _open(self, now: float, index: int) -> None:
        self._index = index
        self._start = self._t0 + index * BUCKET_S
        self._end = self._start + BUCKET_S
        self._last = max(now, self._start)
        self.arrivals = self.arrivals_ops = 0
        self.responses = self.responses_ops = 0
        self.throttled = self.throttled_ops = 0
        self.lost = 0
        self.max_in_flight = self.in_flight
        self.max_in_flight_ops = self.in_flight_ops
        self._area = 0.0
        self._area_ops = 0.0

    def _close(self, until: float) -> dict[str, Any]:
        span = until - self._start
        tail = max(0.0, until - self._last)
        area = self._area + self.in_flight * tail
        area_ops = self._area_ops + self.in_flight_ops * tail
        return {
            "t": round(self._index * BUCKET_S, 3), "arrivals": self.arrivals,
            "arrivals_ops": self.arrivals_ops, "responses": self.responses,
            "responses_ops": self.responses_ops, "throttled": self.throttled,
            "throttled_ops": self.throttled_ops, "lost": self.lost,
            "max_in_flight": self.max_in_flight, "max_in_flight_ops": self.max_in_flight_ops,
            "mean_in_flight": round(area / span, 2) if span > 0 else float(self.in_flight),
            "mean_in_flight_ops": (round(area_ops / span, 2) if span > 0
                                   else float(self.in_flight_ops)),
        }

    def _roll(self, now: float) -> None:
        """Close the current bucket (and record quiet ones) up to the bucket holding ``now``."""
        if len(self.buckets) == self.buckets.maxlen:
            self.dropped += 1
        self.buckets.append(self._close(self._end))
        target = int((now - self._t0) / BUCKET_S)
        index = self._index + 1
        while index < target:  # quiet buckets: nothing happened, in-flight constant
            self._open(self._t0 + index * BUCKET_S, index)
            self.buckets.append(self._close(self._end))
            index += 1
        self._open(now, max(index, target))

    def _advance(self, now: float) -> None:
        if now >= self._end:
            self._roll(now)
        dt = now - self._last
        if dt > 0:
            self._area += self.in_flight * dt
            self._area_ops += self.in_flight_ops * dt
            self._last = now

    # arrive() and depart() carry _advance()'s lines inline: they run twice per request
    def arrive(self, now: float, ops: int) -> None:
        if now >= self._end:
            self._roll(now)
        dt = now - self._last
        if dt > 0.0:
            self._area += self.in_flight * dt
            self._area_ops += self.in_flight_ops * dt
            self._last = now
        self.arrivals += 1
        self.arrivals_ops += ops
        self.in_flight += 1
        self.in_flight_ops += ops
        # comparisons, not max(): a call costs more on the per-request path
        if self.in_flight > self.max_in_flight:  # noqa: PLR1730
            self.max_in_flight = self.in_flight
        if self.in_flight_ops > self.max_in_flight_ops:  # noqa: PLR1730
            self.max_in_flight_ops = self.in_flight_ops

    def depart(self, now: float, ops: int, *, lost: bool = False, sent: bool = True) -> None:
        """A response sent (or, ``lost``, its connection closed instead; or, not ``sent``,
        its client gone before it was due)."""
        if now >= self._end:
            self._roll(now)
        dt = now - self._last
        if dt > 0.0:
            self._area += self.in_flight * dt
            self._area_ops += self.in_flight_ops * dt
            self._last = now
        self.in_flight -= 1
        self.in_flight_ops -= ops
        if lost:
            self.lost += 1
        elif sent:
            self.responses += 1
            self.responses_ops += ops

    def throttle(self, now: float, ops: int) -> None:
        self._advance(now)
        self.throttled += 1
        self.throttled_ops += ops

    def snapshot(self, now: float) -> dict[str, Any]:
        """Every closed bucket and the current partial one."""
        self._advance(now)
        current = self._close(now) if now > self._start else None
        buckets = list(self.buckets)
        if current is not None:
            current["partial"] = True
            buckets.append(current)
        return {"bucket_s": BUCKET_S, "dropped": self.dropped, "buckets": buckets}
