"""Human units: sizes in IEC units, durations as the two largest parts, and parsing ``7d``."""

from __future__ import annotations

import re

_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def human_size(n: int) -> str:
    """``1536`` -> ``1.5 KiB``; whole bytes below 1 KiB."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _SIZE_UNITS[1:]:
        value /= 1024.0
        if value < 1024.0 or unit == _SIZE_UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    """``0.0123`` -> ``12 ms``, ``75`` -> ``1m 15s``, ``90061`` -> ``1d 1h``."""
    if seconds < 0:
        return "-" + human_duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    total = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return " ".join(parts[:2])  # "3d 4h" is what a person wants, not "3d 4h 12m 9s"


def parse_duration(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"1h30m"``, ``"7d"``, ``"2w"`` -> seconds; ``ValueError`` if not."""
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    pos = 0
    total = 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _SECONDS[m.group(2).lower()]
        pos = m.end()
    if pos != len(s):
        raise ValueError(f"{text!r} is not a duration (examples: 45s, 30m, 12h, 7d, 1h30m)")
    return total
