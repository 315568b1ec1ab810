"""A worker process of a commit's renames: ``python -m committer.store.fanout_worker``.

Started by ``fanout.py``, spoken to over its standard input and output in length-prefixed
pickled frames (nothing else may write to its standard output, so ``print`` goes to standard
error): ``("open", location, config)`` opens the store, ``("batch", id, entries)`` renames
through a ``ManagedStore`` of this process and answers ``("done", id, tally)`` or
``("failed", id, error, tally)``, ``("tail",)`` says the commit's last renames are being
sent (the backend's ``tail_begins``), ``("stop",)`` ends it once every batch is answered; the end
of its input without ``stop`` (the committing process died) ends it at once. Batches
run on ``io_threads`` threads, so that this process's request loop has many in flight, as the
committing process's has.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from committer.errors import StoreError
from committer.statistics import IOStatistics
from committer.store.fanout import error_fields, read_frame, write_frame


def main() -> int:
    out: IO[bytes] = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray output goes to standard error, not into the frames
    source: IO[bytes] = sys.stdin.buffer
    message = read_frame(source)
    if message is None or message[0] != "open":
        return 2
    from committer.store import ManagedStore, open_backend

    _, location, config = message
    try:
        backend = open_backend(location, config.storage_options)
    except Exception as e:
        write_frame(out, ("failed", 0, error_fields(e)))
        return 1
    write_frame(out, ("ready",))
    lock = threading.Lock()

    def answer(frame: tuple[Any, ...]) -> None:
        with lock:
            write_frame(out, frame)

    def rename(batch: int, entries: list[tuple[str, str, int | None, str | None]]) -> None:
        stats = IOStatistics()
        store = ManagedStore(backend, config, stats)  # its own statistics, sent back
        try:
            store.rename_batch(entries)
        except StoreError as e:
            store.count_requests()
            answer(("failed", batch, error_fields(e), stats.take()))
            return
        except Exception as e:  # anything else is a bug; report it as the batch's failure
            store.count_requests()
            answer(("failed", batch, error_fields(e), stats.take()))
            return
        # the requests this worker sent (for any batch: the sum is what matters), sent back
        store.count_requests()
        answer(("done", batch, stats.take()))

    with ThreadPoolExecutor(config.io_threads, thread_name_prefix="fanout") as pool:
        while True:
            message = read_frame(source)
            if message is None:
                # The committing process is gone without saying stop: it died. A worker is a
                # part of it and dies with it, its batches unfinished, rather than go on
                # renaming under whoever resumes or rolls the commit back.
                os._exit(3)
            if message[0] == "stop":
                break
            if message[0] == "tail":  # the commit's last renames: race their tail
                backend.tail_begins()
                continue
            pool.submit(rename, message[1], message[2])
    backend.close()
    out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
