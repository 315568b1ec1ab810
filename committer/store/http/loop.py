"""The event loop the lean request path runs on: one per process, on a daemon thread.

uvloop when it is installed (the ``azure`` and ``gcs`` extras bring it on Linux and macOS): its
loop costs about a third of the standard one per request, measured with the committer's own
client against a local server (``docs/stores.md``, "The request path"). Otherwise asyncio's own.

A forked child gets a loop of its own on first use (a thread does not survive ``fork``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_cpu_seconds", "new_event_loop", "run", "wire_loop"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0
_thread: threading.Thread | None = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop if available, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def wire_loop() -> asyncio.AbstractEventLoop:
    """This process's request loop, started on first use."""
    global _loop, _pid, _thread
    loop = _loop
    if loop is not None and _pid == os.getpid() and loop.is_running():
        return loop
    with _lock:
        if _loop is None or _pid != os.getpid() or not _loop.is_running():
            started = threading.Event()
            new = new_event_loop()

            def serve() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(started.set)
                new.run_forever()

            thread = threading.Thread(target=serve, name="committer-wire", daemon=True)
            thread.start()
            started.wait()
            _loop, _pid, _thread = new, os.getpid(), thread
        return _loop


def loop_cpu_seconds() -> float | None:
    """The CPU time the request loop's thread has used so far (``None`` where a thread's
    clock cannot be read, or before the loop started): how busy the loop is, which decides
    whether more loops would help (``fanout.py``)."""
    thread = _thread
    if thread is None or thread.ident is None or _pid != os.getpid():
        return None
    try:
        clock = time.pthread_getcpuclockid(thread.ident)
        return time.clock_gettime(clock)
    except (AttributeError, OSError):
        return None


def run(loop: asyncio.AbstractEventLoop, fn: Callable[..., Coroutine[Any, Any, T]],
        *args: Any, timeout: float | None = None) -> T:
    """Run ``fn(*args)`` on ``loop`` (another thread's) and return its result; its exception
    is raised here. Calling it from the loop's own thread would deadlock, so that is refused."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise RuntimeError("run() called from the loop it would wait for")
    future = asyncio.run_coroutine_threadsafe(fn(*args), loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"{getattr(fn, '__name__', fn)} did not finish in {timeout} s") \
            from None
