"""The simulator's counters since the last reset, and its own process's CPU and memory.

CPU is the process's ``getrusage(RUSAGE_SELF)`` (user and system seconds): since the
simulator is its own process, this is the service's cost alone, apart from the client's. Peak
RSS is ``VmHWM`` from ``/proc/self/status`` (the high-water mark of the resident set since the
process started; ``ru_maxrss`` where there is no ``/proc``).
"""

from __future__ import annotations

import resource
import time
from typing import Any

__all__ = ["Stats", "memory_kib", "process_cpu"]


def process_cpu() -> tuple[float, float]:
    """``(user, system)`` CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def memory_kib() -> dict[str, int]:
    """``{"rss": ..., "peak_rss": ...}`` of this process, in KiB."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out["peak_rss"] = int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    out["rss"] = int(line.split()[1])
    except OSError:
        out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


class Stats:
    """Counters of data requests (the control API is not counted).

    The per-request path only bumps ``requests``, ``ops``, the byte counts and one counter
    per ``(operation, status)`` (status 0: the answer was lost); the views by operation and
    by status are derived when read. A batch is counted as one request of its own operation
    and its sub-requests as operations of theirs (``sub_counts``)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0  # HTTP requests
        self.ops = 0  # operations: a batch counts one per sub-request
        self.counts: dict[tuple[str, int], int] = {}
        self.sub_counts: dict[tuple[str, int], int] = {}
        self.throttled_bucket = 0
        self.throttled_injected = 0
        self.throttled_by_op: dict[str, int] = {}
        self.failed_injected = 0
        self.abandoned = 0  # answers whose client had gone when they were due
        self.bytes_in = 0
        self.bytes_out = 0
        self._cpu0 = process_cpu()
        self._t0 = time.monotonic()

    def sub_request(self, op: str, status: int) -> None:
        """A batch's sub-request, answered ``status``."""
        key = (op, status)
        self.sub_counts[key] = self.sub_counts.get(key, 0) + 1

    def throttled(self, op: str, *, injected: bool) -> None:
        if injected:
            self.throttled_injected += 1
        else:
            self.throttled_bucket += 1
        self.throttled_by_op[op] = self.throttled_by_op.get(op, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        user, system = process_cpu()
        user0, system0 = self._cpu0
        by_op: dict[str, int] = {}
        requests_by_op: dict[str, int] = {}  # a batch one request, its parts not counted
        for (op, _), n in self.counts.items():
            requests_by_op[op] = requests_by_op.get(op, 0) + n
        by_status: dict[int, int] = {}
        by_op_status: dict[str, dict[str, int]] = {}
        lost_by_op: dict[str, int] = {}
        sub_by_status: dict[int, int] = {}
        for counts, sub in ((self.counts, False), (self.sub_counts, True)):
            for (op, status), n in sorted(counts.items()):
                by_op[op] = by_op.get(op, 0) + n
                if status == 0:
                    lost_by_op[op] = lost_by_op.get(op, 0) + n
                    continue
                target = sub_by_status if sub else by_status
                target[status] = target.get(status, 0) + n
                per = by_op_status.setdefault(op, {})
                per[str(status)] = per.get(str(status), 0) + n
        return {
            "window_s": round(time.monotonic() - self._t0, 6),
            "requests": self.requests, "ops": self.ops,
            "by_op": by_op, "requests_by_op": dict(sorted(requests_by_op.items())),
            "by_status": {str(k): v for k, v in sorted(by_status.items())},
            "by_op_status": by_op_status,
            "sub_by_status": {str(k): v for k, v in sorted(sub_by_status.items())},
            "throttled": {"bucket": self.throttled_bucket, "injected": self.throttled_injected,
                          "by_op": dict(self.throttled_by_op)},
            "failed_injected": self.failed_injected,
            "lost": sum(lost_by_op.values()), "lost_by_op": lost_by_op,
            "abandoned": self.abandoned,
            "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
            "cpu": {"user_s": round(user - user0, 6), "system_s": round(system - system0, 6),
                    "total_s": round(user - user0 + system - system0, 6),
                    "process_user_s": round(user, 6), "process_system_s": round(system, 6)},
            "memory_kib": memory_kib(),
        }
