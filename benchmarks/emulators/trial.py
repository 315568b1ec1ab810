"""One timed commit in a fresh interpreter: ``python -m benchmarks.emulators.trial PARAMS.json``.

A fresh process per trial makes its peak RSS its own and keeps the parent's set-up garbage out
of the timing. Prints one JSON object: seconds, files moved, the client's CPU seconds and its
peak and starting RSS.

The peak is ``VmHWM`` from ``/proc/self/status``, not ``ru_maxrss``: Linux carries
``ru_maxrss`` over ``execve`` from the forked copy of the parent, so a trial started by a
harness holding 150 MiB reported 150 MiB whatever it did itself (the figures of this suite
before this fix were the harness's size, growing with the prepared job).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import current_rss_bytes
from benchmarks.emulators.modes import RUNNERS


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _warm_imports(kind: str) -> None:
    """Import every SDK any mode uses before the clock starts: a commit in a long-running
    driver does not pay for imports, and no mode should be charged for them."""
    import os

    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import aiohttp  # noqa: F401

    if kind == "azurite":
        import adlfs  # noqa: F401
        import azure.storage.blob.aio  # noqa: F401

        import committer.store.azure
    else:
        import gcsfs.core  # noqa: F401

        import committer.store.gcs  # noqa: F401


def peak_rss_bytes() -> int:
    """This process's own peak resident set size (``VmHWM``; see the module doc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(argv: list[str]) -> int:
    params: dict[str, Any] = json.loads(Path(argv[0]).read_text())
    _warm_imports(params["kind"])
    runner = RUNNERS[params["mode"]]
    job = params["job"]
    base_rss = current_rss_bytes()
    cpu0, t0 = _cpu(), time.perf_counter()
    moved = runner(params["kind"], params["options"], job, int(params["concurrency"]))
    elapsed = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    if moved != len(job["pairs"]):
        raise SystemExit(f"{params['mode']} moved {moved} files, expected {len(job['pairs'])}")
    print(json.dumps({"seconds": elapsed, "files": moved, "client_cpu_s": cpu,
                      "peak_rss": peak_rss_bytes(), "base_rss": base_rss,
                      "peak_rss_source": "VmHWM"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
