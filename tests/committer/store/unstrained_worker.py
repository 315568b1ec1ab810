"""``committer.store.fanout_worker`` whose cloud stores are never strained (``PinnedStrain``):
a test of what a worker process races must not hang on how busy the machine is, since this
client's own lag on a loaded machine reads as a slowed service, and a strained service gets no
race (``committer/store/http/strain.py``). Run as ``python -m`` from the checkout's root."""

from __future__ import annotations

import sys

from committer.store import fanout_worker
from committer.store.http import limiter
from tests.committer.helpers import PinnedStrain

if __name__ == "__main__":
    limiter.Strain = PinnedStrain  # type: ignore[attr-defined]  # every limit it makes
    sys.exit(fanout_worker.main())
