"""Paths relative to the deepest directory they share, opened once for a chunk of them.

The kernel then walks one or two components per path instead of a dozen: a chunk's renames
and its ``rmdir`` runs (``store.py``) go through these.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def _common_prefix_length(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share, by halving: a few slice compares
    instead of a Python loop over each character (it runs twice per chunk of renames)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _open_common_dir(paths: list[str] | Sequence[str]) -> tuple[int, int] | None:
    """Open the deepest directory containing every one of ``paths`` (absolute OS paths) and
    return ``(fd, length of its path with the trailing slash)``, so ``path[length:]`` is each
    path relative to it; ``None`` if the paths are not all absolute or it cannot be opened."""
    if not paths:
        return None
    lo, hi = min(paths), max(paths)  # the common prefix of all is the common prefix of these
    slash = lo.rfind("/", 0, _common_prefix_length(lo, hi))
    if not lo.startswith("/") or slash < 0:
        return None
    root = lo[: slash + 1]
    try:
        fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    return fd, len(root)


def _relative(paths: Sequence[str], cut: int) -> list[bytes]:
    """Each path without its first ``cut`` characters, encoded as ``os.fsencode`` would."""
    encoding, errors = _FS_ENCODING, _FS_ERRORS
    return [p[cut:].encode(encoding, errors) for p in paths]
