"""Progress reporting: a callback ``(stage, done, total)`` a CLI or notebook turns into bars.

Stages call it when they start (done=0), as work completes, and when they end (done=total).
Exceptions raised by a callback are not the commit's business: they are logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

ProgressCallback = Callable[[str, int, int], None]

LOG = logging.getLogger("committer.progress")


def notify(callback: ProgressCallback | None, stage: str, done: int, total: int) -> None:
    if callback is None:
        return
    try:
        callback(stage, done, total)
    except Exception:
        LOG.exception("progress callback failed for stage %s", stage)
