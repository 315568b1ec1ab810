"""A GCS bucket's request rates as Google documents them: a cold bucket, and its ramp.

Cloud Storage, "Request rate and access distribution guidelines"
(https://cloud.google.com/storage/docs/request-rate, "Auto-Scaling", "Ramp up request rate
gradually"), and "Quotas & limits" (https://cloud.google.com/storage/quotas, "Objects"):

- a bucket starts at about **1,000 object write requests a second** (uploads, updates and
  deletes) and **5,000 object read requests a second** (listings and reads of data or
  metadata);
- as a bucket's request rate grows, Cloud Storage raises its capacity, taking "on the order of
  minutes"; a client should ramp up no faster than **doubling over 20 minutes**, and back off
  exponentially on 408, 429 and 5xx;
- **one write a second to the same object name**; faster ones "might result in throttling
  errors" (429).

The model (:class:`BucketRates`, one per bucket; :class:`GcsRates`, every bucket of the
account): writes and reads are two token buckets (:class:`Ramp`) whose rates start at the
documented figures and grow continuously, doubling every ``doubling_s`` (20 minutes, divided
by the time scale: ``SimOptions.gcs_time_scale``, so tests and benchmarks run the ramp in
seconds or minutes; the rates themselves are never scaled) while the bucket is under
sustained load: a second in which requests of that kind arrived (served or refused) at
``LOADED_SHARE`` of the rate or more makes the next second one of growth. Nothing makes a
bucket's capacity fall back (the service keeps it for weeks). Each bucket holds
``burst_s`` of its rate (``SimOptions.burst_s``; it starts full). A write is also refused when
the same object name was written less than a second before (:class:`ObjectWrites`).
``max_rate`` (``SimOptions.ops_limit`` in this model) is a ceiling the ramp stops at, 0 none.

What counts as what: uploads, rewrites and copies (their destination), deletes and moves (both
names), and a folder's create, delete and rename are writes, a recursive folder delete one more
for each object and folder it deletes (taken whatever the tokens, into debt); object reads,
listings, a folder's read or listing and an operation's status are reads; bucket requests are
neither (the service limits them apart). A batch counts as each of its parts, each admitted or
refused apart, as the service does.

A refused request gets 429 with the JSON API's error body (``usageLimits`` /
``rateLimitExceeded``) and no ``Retry-After``: the service sends none; clients back off
exponentially. The per-object answer's message is the service's (as clients report it); the
bucket's is this simulator's own (Google publishes no text for it).

The least time the ramp allows for ``writes`` write requests (:func:`ramp_bound_s`), starting
cold and loaded throughout: the rate ``r0 * 2^(t/P)`` integrated, ``r0 P / ln 2 (2^(T/P) -
1) = writes``, so ``T = P log2(1 + writes ln 2 / (r0 P))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "DOUBLING_S",
    "INITIAL_READS",
    "INITIAL_WRITES",
    "LOADED_SHARE",
    "OBJECT_WRITES_PER_S",
    "READS",
    "WRITES",
    "BucketRates",
    "GcsRates",
    "ObjectWrites",
    "Ramp",
    "RateRefusal",
    "kind_of",
    "ramp_bound_s",
    "refusal_message",
]

INITIAL_WRITES: Final = 1000.0
INITIAL_READS: Final = 5000.0
#: the documented ramp: at most doubling over 20 minutes
DOUBLING_S: Final = 20 * 60.0
OBJECT_WRITES_PER_S: Final = 1.0
#: a second whose arrivals reach this share of the rate is sustained load: the next grows
LOADED_SHARE: Final = 0.5
WINDOW_S: Final = 1.0
#: seconds of history kept per ramp (its rate at each window's end), for reports
_HISTORY: Final = 7200

WRITES: Final = "writes"
READS: Final = "reads"
#: operations of the simulated JSON API (``gcs_json.py``, ``gcs_folders.py``) by kind
_WRITE_OPS: Final = frozenset({"upload", "rewrite", "copy", "delete_object", "move", "xml_copy",
                               "xml_delete", "create_folder", "delete_folder", "rename_folder",
                               "delete_folder_recursive"})
_READ_OPS: Final = frozenset({"get_object", "get_media", "list_objects", "get_folder",
                              "list_folders", "get_operation"})


def kind_of(op: str) -> str | None:
    """``WRITES``, ``READS``, or ``None`` for what the bucket's rates do not count."""
    if op in _WRITE_OPS:
        return WRITES
    if op in _READ_OPS:
        return READS
    return None


def ramp_bound_s(writes: float, *, initial: float = INITIAL_WRITES,
                 doubling_s: float = DOUBLING_S) -> float:
    """The least seconds a cold bucket's ramp allows for ``writes`` write requests."""
    if writes <= 0:
        return 0.0
    return doubling_s * math.log2(1 + writes * math.log(2) / (initial * doubling_s))


class Ramp:
    """One kind of request of one bucket: a token bucket of ``rate`` a second holding
    ``burst_s`` of it, the rate doubling every ``doubling_s`` of sustained load (up to
    ``max_rate``, 0: none). Times are the model's seconds, passed in."""

    __slots__ = ("_arrivals", "_last", "_loaded", "_window_end", "burst_s", "doubling_s",
                 "history", "loaded_s", "max_rate", "rate", "refused", "served", "tokens")

    def __init__(self, initial: float, doubling_s: float, burst_s: float, now: float,
                 max_rate: float = 0.0) -> None:
        if initial <= 0 or doubling_s <= 0 or burst_s <= 0:
            raise ValueError("a ramp needs a positive rate, doubling time and burst")
        self.rate = float(initial)
        self.doubling_s = float(doubling_s)
        self.burst_s = float(burst_s)
        self.max_rate = float(max_rate)
        self.tokens = self.rate * self.burst_s
        self._last = now
        self._window_end = now + WINDOW_S
        self._arrivals = 0.0
        self._loaded = False
        self.loaded_s = 0.0  # seconds of growth so far
        self.served = 0
        self.refused = 0
        self.history: list[tuple[float, float]] = []  # (window's end, rate)

    def _flow(self, until: float) -> None:
        """Tokens (and, under load, rate) from the last update to ``until``, one window."""
        dt = until - self._last
        if dt <= 0:
            return
        rate = self.rate
        if self._loaded and (not self.max_rate or rate < self.max_rate):
            grown = rate * 2 ** (dt / self.doubling_s)
            if self.max_rate and grown > self.max_rate:
                grown = self.max_rate
            # the tokens of a rising rate: its integral (exact while under the ceiling)
            self.tokens += (grown - rate) * self.doubling_s / math.log(2)
            self.rate = grown
            self.loaded_s += dt
        else:
            self.tokens += rate * dt
        cap = self.rate * self.burst_s
        self.tokens = min(self.tokens, cap)
        self._last = until

    def advance(self, now: float) -> None:
        """Bring the bucket to ``now``: each window that ended says whether the next grows."""
        while now >= self._window_end:
            end = self._window_end
            self._flow(end)
            self._loaded = self._arrivals >= LOADED_SHARE * self.rate * WINDOW_S
            self._arrivals = 0.0
            if len(self.history) < _HISTORY:
                self.history.append((end, self.rate))
            self._window_end = end + WINDOW_S
            if now >= self._window_end + WINDOW_S:
                # the window the flag is for went by with nothing arriving, and so did every
                # window after it up to the one holding ``now``: none of those grows
                self._flow(self._window_end)
                self._loaded = False
                start = self._window_end + math.floor(
                    (now - self._window_end) / WINDOW_S) * WINDOW_S
                self._flow(start)
                self._window_end = start + WINDOW_S
        self._flow(now)

    def take(self, now: float, n: int = 1) -> bool:
        """Admit ``n`` requests if the bucket holds their tokens (counted as arrivals either
        way)."""
        self.advance(now)
        self._arrivals += n
        if self.tokens >= n:
            self.tokens -= n
            self.served += n
            return True
        self.refused += n
        return False

    def charge(self, now: float, n: int) -> None:
        """``n`` requests the service carries out whatever the tokens (the deletes of a
        recursive folder delete): taken, into debt, so what comes next waits for them."""
        self.advance(now)
        self._arrivals += n
        self.tokens -= n
        self.served += n

    def describe(self) -> dict[str, Any]:
        return {"rate": round(self.rate, 3), "tokens": round(self.tokens, 3),
                "loaded_s": round(self.loaded_s, 3), "served": self.served,
                "refused": self.refused, "doubling_s": self.doubling_s,
                "max_rate": self.max_rate}


class ObjectWrites:
    """Writes to one object name at most ``rate`` a second: a write is refused when the name
    was last written (admitted) less than ``1 / rate`` seconds before. Two generations of
    names written, each spanning one interval, so memory is the writes of two seconds."""

    __slots__ = ("_old", "_recent", "_rotated", "interval", "refused")

    def __init__(self, rate: float, now: float) -> None:
        if rate <= 0:
            raise ValueError("an object write rate must be positive")
        self.interval = 1.0 / rate
        self._recent: dict[tuple[str, str], float] = {}
        self._old: dict[tuple[str, str], float] = {}
        self._rotated = now
        self.refused = 0

    def allow(self, bucket: str, key: str, now: float) -> bool:
        if now - self._rotated >= self.interval:
            self._old = self._recent if now - self._rotated < 2 * self.interval else {}
            self._recent = {}
            self._rotated = now
        name = (bucket, key)
        last = self._recent.get(name)
        if last is None:
            last = self._old.get(name)
        if last is not None and now - last < self.interval:
            self.refused += 1
            return False
        self._recent[name] = now
        return True


class BucketRates:
    """The write and read ramps of one bucket."""

    __slots__ = ("reads", "writes")

    def __init__(self, *, doubling_s: float, burst_s: float, now: float,
                 max_rate: float = 0.0) -> None:
        self.writes = Ramp(INITIAL_WRITES, doubling_s, burst_s, now, max_rate)
        self.reads = Ramp(INITIAL_READS, doubling_s, burst_s, now, max_rate)


#: a refusal: (the object name the per-object limit refused, or None for the bucket's rate)
RateRefusal = tuple[str, str | None]


class GcsRates:
    """Every bucket's rates, and the per-object write limit, on the model's clock: the event
    loop's seconds, or (``manual``) seconds advanced only by :meth:`advance` (deterministic
    tests)."""

    def __init__(self, clock: Callable[[], float], *, time_scale: float = 1.0,
                 burst_s: float = 0.25, max_rate: float = 0.0,
                 object_rate: float = OBJECT_WRITES_PER_S, manual: bool = False,
                 ramps: bool = True) -> None:
        if time_scale <= 0:
            raise ValueError("the time scale must be positive")
        self._clock = clock
        self.manual = manual
        #: False: the per-object limit alone (a warm bucket's rate is the account's)
        self.ramps = ramps
        self._offset = 0.0
        self.time_scale = time_scale
        self.doubling_s = DOUBLING_S / time_scale
        self.burst_s = burst_s
        self.max_rate = max_rate
        self.buckets: dict[str, BucketRates] = {}
        self.objects = ObjectWrites(object_rate, self.now()) if object_rate > 0 else None

    def now(self) -> float:
        return self._offset if self.manual else self._clock() + self._offset

    def advance(self, seconds: float) -> float:
        """Move the model's clock on (tests; a real clock keeps flowing too)."""
        if seconds < 0:
            raise ValueError("the clock does not go back")
        self._offset += seconds
        return self.now()

    def bucket(self, name: str) -> BucketRates:
        found = self.buckets.get(name)
        if found is None:
            found = self.buckets[name] = BucketRates(
                doubling_s=self.doubling_s, burst_s=self.burst_s, now=self.now(),
                max_rate=self.max_rate)
        return found

    def admit(self, op: str, bucket: str) -> RateRefusal | None:
        """Whether a request of ``op`` on ``bucket`` goes ahead on the bucket's rate; ``None``
        if it does, else what refused it."""
        if not self.ramps or not bucket:
            return None
        kind = kind_of(op)
        if kind is None:
            return None
        rates = self.bucket(bucket)
        if (rates.writes if kind == WRITES else rates.reads).take(self.now()):
            return None
        return kind, None

    def charge_writes(self, bucket: str, n: int) -> None:
        """``n`` writes one request carries out inside the service (a folder's recursive
        delete: each object and folder it deletes), charged to the bucket's write rate."""
        if self.ramps and bucket and n > 0:
            self.bucket(bucket).writes.charge(self.now(), n)

    def object_write(self, bucket: str, key: str) -> RateRefusal | None:
        """Whether a write of the object ``key`` goes ahead on the per-object limit."""
        if self.objects is None or self.objects.allow(bucket, key, self.now()):
            return None
        return WRITES, key

    def reset(self) -> None:
        """A fresh account: every bucket cold again."""
        self.buckets.clear()
        if self.objects is not None:
            self.objects = ObjectWrites(1.0 / self.objects.interval, self.now())

    def describe(self) -> dict[str, Any]:
        now = self.now()
        for rates in self.buckets.values():
            rates.writes.advance(now)
            rates.reads.advance(now)
        objects = self.objects
        return {"ramps": self.ramps, "time_scale": self.time_scale,
                "doubling_s": self.doubling_s,
                "burst_s": self.burst_s, "max_rate": self.max_rate, "now": self.now(),
                "manual_clock": self.manual,
                "object_writes_per_s": 0 if objects is None else 1.0 / objects.interval,
                "object_refused": 0 if objects is None else objects.refused,
                "buckets": {name: {"writes": r.writes.describe(), "reads": r.reads.describe()}
                            for name, r in self.buckets.items()}}

    def history(self, bucket: str) -> dict[str, list[tuple[float, float]]]:
        rates = self.buckets.get(bucket)
        if rates is None:
            return {WRITES: [], READS: []}
        return {WRITES: list(rates.writes.history), READS: list(rates.reads.history)}


def refusal_message(bucket: str, refusal: RateRefusal) -> str:
    """The 429's message: the service's words for the per-object limit; for the bucket's rate
    this simulator's (the service publishes none)."""
    kind, key = refusal
    if key is not None:
        return (f"The object {bucket}/{key} exceeded the rate limit for object mutation "
                "operations (create, update, and delete). Please reduce your request rate. "
                "See https://cloud.google.com/storage/docs/gcs429.")
    what = "write (upload, update, delete)" if kind == WRITES else "read (read, list)"
    return (f"The bucket {bucket} exceeded its capacity for object {what} requests, which "
            "grows with sustained load. Please reduce your request rate and ramp up "
            "gradually. See https://cloud.google.com/storage/docs/gcs429.")
