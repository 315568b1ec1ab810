"""A real HTTP proxy on 127.0.0.1 for tests: proxy.py (PyPI ``proxy.py``) in a child process.

It forwards plain-HTTP requests (absolute-form targets) and tunnels ``CONNECT``, with Basic
authentication when asked (``auth="user:password"``), and writes one access-log line per client
connection (``CONNECT host:port`` for a tunnel, the first request's method and target for a
forwarded connection; it relays the connection's later requests as they come).
:meth:`HttpProxy.served` parses those lines, so a test can see what went through it.

    with http_proxy(auth="user:secret") as proxy:
        options = {..., "committer_proxy": proxy.url_with_auth}
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from committer.testing.emulators import stop_process

__all__ = ["AccessLine", "HttpProxy", "http_proxy"]

HOST = "127.0.0.1"
_READY_TIMEOUT_S = 120.0  # a bound for a hang (a Python start on a busy machine is slow)
# "127.0.0.1:52544 - CONNECT 127.0.0.1:44253 - 435 bytes - 14.06ms"
# "127.0.0.1:52512 - GET 127.0.0.1:44253/ - 200 OK - 435 bytes - 4.16ms"
_ACCESS = re.compile(r"access_log:\d+ - (?P<client>\S+) - (?P<method>[A-Z]+) (?P<target>\S+)")


@dataclass(frozen=True)
class AccessLine:
    """One client connection the proxy served: its first request (or its tunnel)."""

    method: str
    target: str  # "host:port" for CONNECT, "host:port/path?query" for a forwarded request

    @property
    def port(self) -> int | None:
        """The origin's port, when the proxy knew it (a refused request has none)."""
        hostport = self.target.split("/", 1)[0]
        tail = hostport.rpartition(":")[2]
        return int(tail) if tail.isdigit() else None


class HttpProxy:
    """A running proxy.py; :meth:`start` / :meth:`stop`, or use :func:`http_proxy`."""

    def __init__(self, auth: str | None = None) -> None:
        self.auth = auth
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._log = Path()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url_with_auth(self) -> str:
        return f"http://{self.auth}@{HOST}:{self.port}" if self.auth else self.url

    def start(self) -> HttpProxy:
        self._dir = tempfile.TemporaryDirectory(prefix="http-proxy-")
        port_file = Path(self._dir.name) / "port"
        self._log = Path(self._dir.name) / "proxy.log"
        # one acceptor and worker (a test's load), a long idle timeout (the client keeps
        # connections for 15 s; proxy.py's default drops them after 10)
        argv = [sys.executable, "-m", "proxy", "--hostname", HOST, "--port", "0",
                "--port-file", str(port_file), "--num-acceptors", "1", "--num-workers", "1",
                "--timeout", "120", "--log-level", "INFO", "--log-file", str(self._log)]
        if self.auth:
            argv += ["--basic-auth", self.auth]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                self.port = int(text.split()[0])
                return self
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") \
                    if self.process.stderr else ""
                self.stop()
                raise RuntimeError(f"proxy.py exited with {self.process.returncode}: {err}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"proxy.py not ready after {_READY_TIMEOUT_S:.0f} s")

    def log_text(self) -> str:
        try:
            return self._log.read_text(errors="replace")
        except OSError:
            return ""

    def served(self, count: int, within: float = 60.0) -> list[AccessLine]:
        """The connections served so far, once there are at least ``count`` (a line is
        written when its connection closes, so a connection just closed may not be there
        yet): waits for them, up to ``within`` seconds (a bound for a hang, not a speed)."""
        deadline = time.monotonic() + within
        lines = self._parse()
        while len(lines) < count and time.monotonic() < deadline:
            time.sleep(0.02)
            lines = self._parse()
        return lines

    def _parse(self) -> list[AccessLine]:
        return [AccessLine(m["method"], m["target"])
                for m in _ACCESS.finditer(self.log_text())]

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            if self.process.stderr is not None:
                with contextlib.suppress(OSError):
                    self.process.stderr.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


@contextlib.contextmanager
def http_proxy(auth: str | None = None) -> Iterator[HttpProxy]:
    """A running proxy for the block (``auth``: ``"user:password"`` it requires)."""
    proxy = HttpProxy(auth).start()
    try:
        yield proxy
    finally:
        proxy.stop()
