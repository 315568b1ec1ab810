"""The simulator as a child process, and a handle to reach it.

:class:`CloudSim` starts ``sys.executable -m committer.testing.cloud_sim`` with its options,
waits (bounded) for the ready line, and offers the endpoints, the ``storage_options`` that
``committer.store.open_backend`` takes, and the control API as methods. Stopping terminates
the process and waits for it (killing it if it ignores SIGTERM for 10 s). The child also
stops by itself when this process dies (its stdin pipe closes; on Linux, PR_SET_PDEATHSIG when
started from the main thread), so a killed test run leaves nothing behind.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson

from committer.testing.cloud_sim.options import SimOptions
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY, stop_process

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; annotations only

__all__ = ["CloudSim", "CloudSimError", "start_cloud_sim"]

HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0  # a bound for a hang (a Python start on a busy machine is slow)
# a control request carries at most this many lines or bytes (the simulator holds one request
# body at a time: its peak memory is the objects plus one chunk)
_POPULATE_LINES = 100_000
_POPULATE_BYTES = 16 << 20


class CloudSimError(RuntimeError):
    """The simulator did not start, or a control request failed."""


class CloudSim:
    """A running simulator (after :meth:`start`; a context manager starts and stops it)."""

    def __init__(self, options: SimOptions | None = None, **changes: Any) -> None:
        base = options or SimOptions()
        self.options = SimOptions(**{**base.__dict__, **changes}) if changes else base
        self.ports: dict[str, int] = {}
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    # -- life ------------------------------------------------------------------------------

    def start(self) -> Self:
        if self.process is not None:
            return self
        self._workdir = tempfile.TemporaryDirectory(prefix="cloud-sim-")
        self._log = Path(self._workdir.name) / "cloud_sim.log"
        argv = [sys.executable, "-m", "committer.testing.cloud_sim", *self.options.argv()]
        if threading.current_thread() is threading.main_thread():
            argv += ["--parent-pid", str(os.getpid())]
        with open(self._log, "wb") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log)
        atexit.register(self.stop)
        try:
            self.ports = self._read_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _read_ready(self) -> dict[str, int]:
        proc = self.process
        assert proc is not None and proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CloudSimError(f"cloud_sim not ready after {READY_TIMEOUT_S:.0f}s:\n"
                                        f"{self.log_tail()}")
                if not sel.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    proc.wait(timeout=10)
                    raise CloudSimError(f"cloud_sim exited with code {proc.returncode}:\n"
                                        f"{self.log_tail()}")
                line += chunk
        ready = json.loads(line)
        return {k: int(v) for k, v in ready.items() if k != "service"}

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self._log.read_text(errors="replace")[-limit:] if self._log else ""
        except OSError:
            return ""

    def stop(self) -> None:
        proc = self.process
        if proc is not None:
            stop_process(proc)  # SIGTERM, then SIGKILL after 10 s
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    # -- endpoints -------------------------------------------------------------------------

    def _port(self, name: str) -> int:
        if name not in self.ports:
            raise CloudSimError(f"this simulator ({self.options.service}) has no {name} "
                                f"port; it has {sorted(self.ports)}")
        return self.ports[name]

    @property
    def data_scheme(self) -> str:
        """``https`` when the data ports serve TLS (``SimOptions.tls_cert``), else ``http``."""
        return "https" if self.options.tls_cert is not None else "http"

    @property
    def blob_endpoint(self) -> str:
        return f"{self.data_scheme}://{HOST}:{self._port('blob')}/{AZURITE_ACCOUNT}"

    @property
    def dfs_endpoint(self) -> str:
        return f"{self.data_scheme}://{HOST}:{self._port('dfs')}/{AZURITE_ACCOUNT}"

    @property
    def gcs_endpoint(self) -> str:
        return f"{self.data_scheme}://{HOST}:{self._port('gcs')}"

    @property
    def control_endpoint(self) -> str:
        return f"http://{HOST}:{self._port('control')}"

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol={self.data_scheme};AccountName={AZURITE_ACCOUNT};"
                f"AccountKey={AZURITE_KEY};BlobEndpoint={self.blob_endpoint};")

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``committer.store.open_backend`` reaching this account."""
        if self.options.service == "gcs":
            return {"endpoint_url": self.gcs_endpoint, "token": "anon", "project": "sim"}
        out: dict[str, Any] = {"connection_string": self.connection_string}
        if self.options.service == "adls":
            out["committer_dfs_endpoint"] = self.dfs_endpoint
        return out

    @property
    def trusted_options(self) -> dict[str, Any]:
        """``storage_options`` with what the engine may trust of this account as of the real
        service: on GCS, its preconditions (``ifGenerationMatch``), which it honours as Google
        does (fake-gcs-server ignores them on rewrite, so the engine does not trust them by
        default). What the benchmarks and the commit tests on the simulator open it with."""
        out = self.storage_options
        if self.options.service == "gcs":
            out["committer_trust_preconditions"] = "true"
        return out

    @property
    def scheme(self) -> str:
        """The URL scheme of locations in this account: ``gs`` or ``abfs``."""
        return "gs" if self.options.service == "gcs" else "abfs"

    # -- control API -----------------------------------------------------------------------

    def _control(self, method: str, path: str, body: bytes | None = None,
                 query: Mapping[str, str] | None = None, timeout: float = 600.0) -> bytes:
        # %20 for a space: the control API decodes a query as the Azure endpoints do (a '+'
        # stays a '+', which object names may hold)
        target = path + ("?" + urlencode(query, quote_via=quote) if query else "")
        conn = http.client.HTTPConnection(HOST, self._port("control"), timeout=timeout)
        try:
            conn.request(method, target, body=body)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise CloudSimError(f"control {method} {target}: {response.status} "
                                f"{data[:500].decode(errors='replace')}")
        return data

    def _json(self, method: str, path: str, body: bytes | None = None) -> Any:
        return orjson.loads(self._control(method, path, body))

    def populate(self, records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Store objects (see ``control.py``): each record ``{"bucket", "key", "size"}`` (no
        content) or ``{"bucket", "key", "data_b64"}``. Returns the answers in order
        (``etag``, ``md5``, ``generation``, ``crc32c``). A line the simulator refused is a
        :class:`CloudSimError`."""
        answers: list[dict[str, Any]] = []
        for data in self._populate(records, results=True):
            answers += [orjson.loads(line) for line in data.splitlines()]
        for answer in answers:
            if "error" in answer:
                raise CloudSimError(f"populate: {answer}")
        return answers

    def populate_count(self, records: Iterable[Mapping[str, Any]]) -> int:
        """:meth:`populate` without the per-object answers (for millions): how many were
        stored."""
        stored = 0
        for data in self._populate(records, results=False):
            answer = orjson.loads(data)
            if answer.get("errors"):
                raise CloudSimError(f"populate: {answer}")
            stored += int(answer["stored"])
        return stored

    def _populate(self, records: Iterable[Mapping[str, Any]], *,
                  results: bool) -> Iterator[bytes]:
        chunk: list[bytes] = []
        size = 0
        query = None if results else {"results": "0"}
        for record in records:
            line = orjson.dumps(record if type(record) is dict else dict(record))
            chunk.append(line)
            size += len(line)
            if len(chunk) >= _POPULATE_LINES or size >= _POPULATE_BYTES:
                yield self._control("POST", "/populate", b"\n".join(chunk) + b"\n", query)
                chunk.clear()
                size = 0
        if chunk:
            yield self._control("POST", "/populate", b"\n".join(chunk) + b"\n", query)

    def objects(self, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
        """Every object (and, with a namespace, directory) under ``prefix``."""
        data = self._control("GET", "/objects", query={"bucket": bucket, "prefix": prefix})
        return [orjson.loads(line) for line in data.splitlines() if line]

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self._json("GET", "/stats")
        return out

    def timeline(self) -> dict[str, Any]:
        out: dict[str, Any] = self._json("GET", "/timeline")
        return out

    def reset_stats(self) -> None:
        self._control("POST", "/reset-stats")

    def reset(self) -> None:
        """Drop every bucket, fault and statistic."""
        self._control("POST", "/reset")

    def gcs_rates(self) -> dict[str, Any]:
        """A cold GCS bucket's model now (``gcs_rates.py``): every bucket's write and read
        rates, tokens, seconds of growth, served and refused requests."""
        out: dict[str, Any] = self._json("GET", "/gcs/rates")
        return out

    def gcs_rate_history(self, bucket: str) -> dict[str, list[list[float]]]:
        """Each ramp of ``bucket``: ``[time, rate]`` at the end of each second of the model."""
        out: dict[str, list[list[float]]] = orjson.loads(
            self._control("GET", "/gcs/rates/history", query={"bucket": bucket}))
        return out

    def advance_gcs_clock(self, seconds: float) -> float:
        """Move the GCS rate model's clock on (with ``gcs_manual_clock``, its only motion);
        returns the model's time."""
        out = self._json("POST", "/gcs/clock", orjson.dumps({"advance_s": seconds}))
        return float(out["now"])

    def set_faults(self, **spec: Any) -> dict[str, Any]:
        """Arm faults (``faults.py``): ``throttle_rate``, ``lose_rate``, ``ops``,
        ``fail=[{"op", "times", "status", "code"}]``, ``lose=[{"op", "times"}]``,
        ``garble=[{"op", "times"}]`` (carried out, a multipart answer no client can read),
        ``clear``, ``seed``. Returns what is armed."""
        out: dict[str, Any] = self._json("POST", "/faults", orjson.dumps(spec))
        return out


@contextlib.contextmanager
def start_cloud_sim(options: SimOptions | None = None, **changes: Any) -> Iterator[CloudSim]:
    """A running :class:`CloudSim` for the block."""
    sim = CloudSim(options, **changes).start()
    try:
        yield sim
    finally:
        sim.stop()
