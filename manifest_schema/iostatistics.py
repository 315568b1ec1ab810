"""Hadoop's IOStatisticsSnapshot JSON: counters, gauges, minimums, maximums, mean statistics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from manifest_schema.errors import FormatError


@dataclass(frozen=True, slots=True)
class MeanStatistic:
    samples: int
    sum: int

    @property
    def mean(self) -> float:
        return self.sum / self.samples if self.samples else 0.0


@dataclass(frozen=True)
class IOStatisticsSnapshot:
    counters: Mapping[str, int] = field(default_factory=dict)
    gauges: Mapping[str, int] = field(default_factory=dict)
    minimums: Mapping[str, int] = field(default_factory=dict)
    maximums: Mapping[str, int] = field(default_factory=dict)
    meanstatistics: Mapping[str, MeanStatistic] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "counters": dict(sorted(self.counters.items())),
            "gauges": dict(sorted(self.gauges.items())),
            "minimums": dict(sorted(self.minimums.items())),
            "maximums": dict(sorted(self.maximums.items())),
            "meanstatistics": {
                k: {"samples": v.samples, "sum": v.sum}
                for k, v in sorted(self.meanstatistics.items())
            },
        }

    @classmethod
    def from_json(cls, doc: Any, source: str, where: str = "iostatistics") -> IOStatisticsSnapshot:
        if doc is None:
            return cls()
        if not isinstance(doc, dict):
            raise FormatError(source, where, "must be an object")

        def ints(name: str) -> dict[str, int]:
            part = doc.get(name) or {}
            if not isinstance(part, dict):
                raise FormatError(source, f"{where}.{name}", "must be an object")
            for k, v in part.items():
                if not isinstance(v, int) or isinstance(v, bool):
                    raise FormatError(source, f"{where}.{name}.{k}", "must be an integer")
            return dict(part)

        means: dict[str, MeanStatistic] = {}
        raw = doc.get("meanstatistics") or {}
        if not isinstance(raw, dict):
            raise FormatError(source, f"{where}.meanstatistics", "must be an object")
        for k, v in raw.items():
            if not isinstance(v, dict):
                raise FormatError(source, f"{where}.meanstatistics.{k}", "must be an object")
            s, t = v.get("samples", 0), v.get("sum", 0)
            if not isinstance(s, int) or not isinstance(t, int):
                raise FormatError(source, f"{where}.meanstatistics.{k}",
                                  "samples and sum must be integers")
            means[k] = MeanStatistic(s, t)
        return cls(ints("counters"), ints("gauges"), ints("minimums"), ints("maximums"), means)

    def merged(self, other: IOStatisticsSnapshot) -> IOStatisticsSnapshot:
        """Counters and means add up; minimums take the least, maximums the greatest."""
        counters = dict(self.counters)
        for k, v in other.counters.items():
            counters[k] = counters.get(k, 0) + v
        gauges = dict(self.gauges)
        for k, v in other.gauges.items():
            gauges[k] = gauges.get(k, 0) + v
        mins = dict(self.minimums)
        for k, v in other.minimums.items():
            mins[k] = min(mins[k], v) if k in mins else v
        maxs = dict(self.maximums)
        for k, v in other.maximums.items():
            maxs[k] = max(maxs[k], v) if k in maxs else v
        means = dict(self.meanstatistics)
        for k, m in other.meanstatistics.items():
            old = means.get(k)
            means[k] = m if old is None else MeanStatistic(old.samples + m.samples, old.sum + m.sum)
        return IOStatisticsSnapshot(counters, gauges, mins, maxs, means)
