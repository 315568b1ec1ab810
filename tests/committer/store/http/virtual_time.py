"""An event loop on virtual time, for tests of timing logic (hedging delays, pacing, read
timeouts) whose outcome must not depend on how busy the machine is.

The loop's clock (``loop.time()``, which ``asyncio.sleep``, ``call_later``, ``wait_for`` and
``wait(timeout=...)`` all follow) stands still while a callback is ready to run and jumps to the
next timer when every task waits on one: a sleep of five seconds takes none, and the order in
which timers fire is that of their deadlines, whatever the machine's load. Code under test that
reads the loop's clock sees exactly the delays the test scripted.

Real I/O still works: each turn the selector is polled first, and the clock moves only when
nothing is ready. ``jumping=False`` keeps the clock still while real I/O the test waits for is
on its way (a connection being opened, a request being read by a server on this loop): the
loop then waits on the selector for real, its timers frozen; set ``loop.jumping = True`` once
nothing but timers is left to wait for.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")

#: how long a loop with no timer may wait for real I/O before it is declared stuck
STUCK_S = 60.0


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None
               ) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        assert loop is not None
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if not loop.jumping:
            # real I/O awaited: wait for it for real (the timers' clock stands still)
            ready = super().select(STUCK_S if timeout is None else min(timeout, STUCK_S))
            if not ready and timeout is None:
                raise RuntimeError(f"virtual time: nothing happened for {STUCK_S:g} s")
            return ready
        if timeout is None:
            raise RuntimeError("virtual time: every task waits, and on no timer (a deadlock)")
        loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """See the module's docstring. ``now`` starts at 0.0."""

    def __init__(self, jumping: bool = True) -> None:
        self.now = 0.0
        self.jumping = jumping
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self

    def time(self) -> float:
        return self.now


def run_virtual(main: Coroutine[Any, Any, T], *, jumping: bool = True) -> T:
    """``asyncio.run(main)`` on a new :class:`VirtualTimeLoop`."""
    loop = VirtualTimeLoop(jumping)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
