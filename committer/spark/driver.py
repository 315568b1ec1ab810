"""Subprocess entry point of the job engine: ``python -m committer.spark.driver [--serve]``.

The JVM shim runs this for every driver (PySpark, a JVM application, ``spark-sql``, the Thrift
server, Spark Connect): the driver's job setup, commit and abort happen here. Requests carry
configuration and store credentials, so they arrive on standard input, never on the command
line; responses go to standard output; logs go to standard error.

``--serve`` (what the shim runs): one long-lived engine per driver JVM. It writes a ready line,
then reads one request per line, ``{"id": n, "request": {...}}``, runs each on its own thread
(a Spark Connect server commits many sessions' jobs at once), and answers each with one line,
``{"id": n, "response": {...}}``, in whatever order they finish. It stops when its standard
input reaches end of file — the JVM closed it, or died, since the kernel closes a killed
process's pipes — and, as a backstop, when its parent process changes. Requests already running
are finished first: a commit is safer completed than stopped between two renames.

Without ``--serve``: one request document on standard input, one response on standard output,
exit status 0 on success and 1 when the operation failed.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO

from committer.spark.engine import (
    CONF_KEY_PREFIXES,
    JVM_PROPERTIES,
    RequestError,
    error_response,
    handle,
)

__all__ = ["PROTOCOL_VERSION", "Server", "main", "server_on_own_pipes"]

LOG = logging.getLogger("committer.spark.driver")
# 2: the ready line names the configuration the engine reads (the shim forwards just that)
PROTOCOL_VERSION = 2
PARENT_POLL_SECONDS = 1.0


def run(stdin: TextIO, stdout: TextIO) -> int:
    """One request, one response (the mode without ``--serve``)."""
    try:
        request: Any = json.load(stdin)
        if not isinstance(request, dict):
            raise RequestError("the request on standard input must be a JSON object")
    except (ValueError, RequestError) as exc:
        response = error_response(RequestError(f"unreadable request: {exc}"))
    else:
        response = handle(request)
    json.dump(response, stdout, ensure_ascii=True, separators=(",", ":"))
    stdout.write("\n")
    stdout.flush()
    return 0 if response.get("ok") else 1


def _line(doc: dict[str, Any]) -> bytes:
    # ASCII JSON has no raw newline, so one document is exactly one line.
    return (json.dumps(doc, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


class Server:
    """The ``--serve`` loop over a pair of byte streams (the child's own pipes)."""

    def __init__(self, requests: BinaryIO, responses: BinaryIO,
                 handler: Callable[[dict[str, Any]], dict[str, Any]] = handle) -> None:
        self._in = requests
        self._out = responses
        self._handler = handler
        self._write_lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()

    def _send(self, doc: dict[str, Any]) -> None:
        data = _line(doc)
        with self._write_lock:
            try:
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                # The JVM is gone; the request's effect stands, nobody is left to tell.
                LOG.warning("could not send response %s: the JVM closed the pipe", doc.get("id"))

    def _serve_one(self, request_id: Any, request: Any) -> None:
        try:
            if not isinstance(request, dict):
                response = error_response(RequestError("'request' must be a JSON object"))
            else:
                response = self._handler(request)
            self._send({"id": request_id, "response": response})
        finally:
            with self._threads_lock:
                self._threads.discard(threading.current_thread())

    def _dispatch(self, raw: bytes) -> None:
        try:
            doc: Any = json.loads(raw)
            if not isinstance(doc, dict) or "id" not in doc:
                raise ValueError("a request line must be an object with 'id' and 'request'")
        except ValueError as exc:
            # Without an id nobody waits for this answer; the JVM never sends such a line.
            LOG.error("unreadable request line (%d bytes): %s", len(raw), exc)
            return
        thread = threading.Thread(target=self._serve_one, args=(doc["id"], doc.get("request")),
                                  name=f"engine-request-{doc['id']}")
        with self._threads_lock:
            self._threads.add(thread)
        thread.start()

    def serve(self) -> int:
        """Until end of input; then waits for the requests still running. Returns 0."""
        self._send({"ready": True, "protocol": PROTOCOL_VERSION, "pid": os.getpid(),
                    "confPrefixes": list(CONF_KEY_PREFIXES), "jvmProperties": list(JVM_PROPERTIES)})
        for raw in iter(self._in.readline, b""):
            if raw.strip():
                self._dispatch(raw)
        self.drain()
        return 0

    def drain(self) -> None:
        """Waits for every request that is running."""
        while True:
            with self._threads_lock:
                running = list(self._threads)
            if not running:
                return
            for thread in running:
                thread.join()

    def watch_parent(self, parent: int, interval: float = PARENT_POLL_SECONDS) -> None:
        """Backstop for end of input: when the parent changes (it died and this process was
        re-parented), finish the running requests and exit."""

        def poll() -> None:
            while os.getppid() == parent:
                threading.Event().wait(interval)
            LOG.warning("parent process %d is gone; the engine stops", parent)
            self.drain()
            os._exit(0)

        threading.Thread(target=poll, name="engine-parent-watch", daemon=True).start()


def _private_stdout() -> BinaryIO:
    """Standard output reserved for responses: a copy of the descriptor is kept for them, and
    descriptor 1 now points at standard error, so a stray print (a library, a C extension)
    lands in the log instead of corrupting the channel."""
    sys.stdout.flush()
    channel = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8",
                                  line_buffering=True)
    return os.fdopen(channel, "wb", buffering=0)


def server_on_own_pipes(
    handler: Callable[[dict[str, Any]], dict[str, Any]] = handle,
) -> Server:
    """The ``--serve`` server of this process (its standard input and a private standard
    output), stopping with its parent; wrappers that run the engine with a handler of their own
    (tests, benchmarks) start theirs here too."""
    parent = os.getppid()
    server = Server(sys.stdin.buffer, _private_stdout(), handler)
    server.watch_parent(parent)
    return server


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args == ["--serve"]:
        return server_on_own_pipes().serve()
    if args:
        print(f"usage: python -m committer.spark.driver [--serve]; got {args}", file=sys.stderr)
        return 2
    # The JVM writes UTF-8 whatever the locale; read it as such.
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")
    return run(stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
