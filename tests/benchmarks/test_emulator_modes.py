"""The emulator harness's raw ceiling: a request the emulator's reset connection lost is sent
again (twice at most), as the committer's managed store would; any other failure ends it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from benchmarks.emulators.modes import _again


def _flaky(failures: list[BaseException]
           ) -> tuple[list[int], Callable[[], Coroutine[Any, Any, None]]]:
    calls: list[int] = []

    async def attempt() -> None:
        calls.append(1)
        if failures:
            raise failures.pop(0)

    return calls, attempt


def test_a_reset_connection_is_tried_again_at_most_twice() -> None:
    calls, attempt = _flaky([ConnectionResetError("reset"), ConnectionResetError("reset")])
    asyncio.run(_again(attempt))
    assert len(calls) == 3
    calls, attempt = _flaky([ConnectionResetError("reset")] * 3)
    with pytest.raises(ConnectionResetError):
        asyncio.run(_again(attempt))
    assert len(calls) == 3


def test_other_failures_are_not_tried_again() -> None:
    calls, attempt = _flaky([RuntimeError("HTTP 412")])
    with pytest.raises(RuntimeError, match="412"):
        asyncio.run(_again(attempt))
    assert len(calls) == 1
