"""The emulator harness's raw ceiling: a request the emulator's reset connection lost is sent
again (a bounded number of times), as the committer's managed store would; any other failure
ends it; its requests move every file."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from benchmarks.emulators import modes
from benchmarks.emulators.modes import _again, run_raw
from committer.store import open_backend
from committer.testing.emulators import RunningEmulator
from tests.emulator_fixtures import azurite_emulator, gcs_emulator

__all__ = ["azurite_emulator", "gcs_emulator"]


def _flaky(failures: list[BaseException]
           ) -> tuple[list[int], Callable[[], Coroutine[Any, Any, None]]]:
    calls: list[int] = []

    async def attempt() -> None:
        calls.append(1)
        if failures:
            raise failures.pop(0)

    return calls, attempt


def test_a_reset_connection_is_tried_again_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(modes, "AGAIN_PAUSE_S", 0.0)
    calls, attempt = _flaky([ConnectionResetError("reset")] * modes.AGAIN)
    asyncio.run(_again(attempt))
    assert len(calls) == modes.AGAIN + 1
    calls, attempt = _flaky([ConnectionResetError("reset")] * (modes.AGAIN + 1))
    with pytest.raises(ConnectionResetError):
        asyncio.run(_again(attempt))
    assert len(calls) == modes.AGAIN + 1


def test_other_failures_are_not_tried_again() -> None:
    calls, attempt = _flaky([RuntimeError("HTTP 412")])
    with pytest.raises(RuntimeError, match="412"):
        asyncio.run(_again(attempt))
    assert len(calls) == 1


@pytest.mark.emulator
@pytest.mark.parametrize("kind", ["azurite", "gcs"])
def test_the_raw_ceiling_renames_every_file(kind: str, request: pytest.FixtureRequest) -> None:
    """The ceiling's requests (copies or batched rewrites, then batched deletes) move every
    file: 230 files, so that batches are full and one is not."""
    emulator: RunningEmulator = request.getfixturevalue(f"{kind}_emulator")
    options = dict(emulator.storage_options)
    root = f"{emulator.scheme}://raw{uuid.uuid4().hex[:8]}"
    backend = open_backend(root, options)
    try:
        pairs = [(f"{root}/task/f{i:03d}", f"{root}/out/f{i:03d}") for i in range(230)]
        for i, (src, _) in enumerate(pairs):
            backend.write_bytes(src, b"x" * (i % 7))
        assert run_raw(kind, options, {"pairs": pairs}, 16) == 230
        for i, (src, dst) in enumerate(pairs):
            assert backend.read_bytes(dst) == b"x" * (i % 7)
            assert not backend.exists(src)
    finally:
        backend.close()
