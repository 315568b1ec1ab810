"""The emulator helpers: loopback only, a free port, ready when returned, gone after exit."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import AbstractContextManager

import psutil
import pytest

from committer.testing.emulators import RunningEmulator, azurite, fake_gcs_server

pytestmark = pytest.mark.emulator


def _listening(pid: int) -> set[tuple[str, int]]:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN}


@pytest.mark.parametrize("start", [azurite, fake_gcs_server], ids=["azurite", "gcs"])
def test_emulator_binds_loopback_and_stops(
        start: Callable[[], AbstractContextManager[RunningEmulator]]) -> None:
    with start() as emu:
        pid, port = emu.pid, emu.port
        listening = _listening(pid)
        assert listening, "the emulator listens on nothing"
        assert all(ip == "127.0.0.1" for ip, _ in listening), listening
        assert ("127.0.0.1", port) in listening
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            pass  # ready means accepting connections
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
