"""The control API: its own listener, JSON / NDJSON, never counted, throttled or delayed.

- ``POST /populate`` (NDJSON, one object a line): ``{"bucket", "key", "size"}`` stores a
  *content-less* source object: only its size; the simulator gives it an etag, a generation
  and a **random** MD5 and CRC32C, reported everywhere as if they were its content's, and a
  read of it returns ``size`` zero bytes. ``{"bucket", "key", "data_b64"}`` stores real bytes
  (manifests), MD5 and CRC32C computed. Buckets (containers) are created as needed; on a
  namespace account the parents become directories. The answer is NDJSON in the same order:
  ``{"etag", "md5" (base64), "generation", "crc32c" (base64)}`` (the etag in the form of the
  account's API: Azure's quoted ``"0x8DE..."`` or GCS's), or ``{"error": ...}`` for a line that
  could not be stored. ``?results=0`` answers one line ``{"stored": n, "errors": m}`` instead.
  After populating, the stored records are moved out of the garbage collector's reach
  (``gc.freeze``), so a million of them cost the collector nothing.
- ``GET /objects?bucket=..&prefix=..``: NDJSON of every object under the prefix (and, on a
  namespace, every directory): ``{"key", "size", "etag", "md5", "generation", "is_dir"}``.
- ``GET /stats``: counters since the last reset (requests by operation and status, throttled
  by the bucket and injected, lost, bytes), the process's CPU seconds and memory (VmHWM),
  what is stored, connections; ``GET /timeline``: the per-100 ms buckets.
- ``POST /reset-stats``: a new measurement window; ``POST /faults`` (JSON, see
  :mod:`faults`), ``GET /faults``; ``POST /reset``: drop every bucket, fault and statistic.
- a cold GCS bucket's model (``gcs_rates.py``): ``GET /gcs/rates`` (every bucket's write and
  read rates, tokens, seconds of growth, served and refused; the per-object limit's refusals),
  ``GET /gcs/rates/history?bucket=..`` (each ramp's rate at the end of each second), ``POST
  /gcs/clock`` ``{"advance_s": s}`` (move the model's clock on: a manual clock's only motion).
"""

from __future__ import annotations

import base64
import binascii
import gc
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from committer.testing.cloud_sim.azure_common import etag_of
from committer.testing.cloud_sim.faults import FaultError
from committer.testing.cloud_sim.gcs_json import gcs_etag
from committer.testing.cloud_sim.gcs_rates import GcsRates
from committer.testing.cloud_sim.namespace import GENERATION_BASE, Namespace, Obj, PathConflict
from committer.testing.cloud_sim.server import Core, Reply, Request, Service

__all__ = ["ControlService", "rates_routes"]

_JSON = "Content-Type: application/json\r\n"
_NDJSON = "Content-Type: application/x-ndjson\r\n"


class ControlService(Service):
    name = "control"
    control = True

    def __init__(self, core: Core, ns: Namespace, *, gcs: bool,
                 info: dict[str, Any]) -> None:
        self.core = core
        self.ns = ns
        self.gcs = gcs
        self.info = info
        self._routes: dict[tuple[str, str], Callable[[Request], Reply]] = {}
        self._on_reset: list[Callable[[], None]] = []

    def extend(self, routes: Mapping[tuple[str, str], Callable[[Request], Reply]], *,
               on_reset: Callable[[], None] | None = None) -> None:
        """More control requests (``(method, path) -> handler``) of a part of the model, and
        what ``POST /reset`` resets of it."""
        self._routes.update(routes)
        if on_reset is not None:
            self._on_reset.append(on_reset)

    def route(self, req: Request) -> str:
        return ""

    def error_reply(self, req: Request, status: int, code: str, message: str) -> Reply:
        return Reply(status, _JSON, orjson.dumps({"error": code, "message": message}))

    def throttled_reply(self, req: Request, retry_after: int) -> Reply:
        raise AssertionError("the control API is never throttled")

    def execute(self, req: Request, op: str) -> Reply:
        m, path = req.method, req.path
        if m == "POST" and path == "/populate":
            return self._populate(req)
        if m == "GET" and path == "/objects":
            return self._objects(req)
        if m == "GET" and path == "/stats":
            return Reply(200, _JSON, orjson.dumps(self.stats()))
        if m == "GET" and path == "/timeline":
            return Reply(200, _JSON, orjson.dumps(
                self.core.timeline.snapshot(self.core.loop.time())))
        if m == "POST" and path == "/reset-stats":
            self.core.reset_stats()
            return Reply(200, _JSON, b'{"ok":true}')
        if path == "/faults" and m in ("GET", "POST"):
            if m == "POST":
                try:
                    spec = orjson.loads(req.body or b"{}")
                    if not isinstance(spec, dict):
                        raise FaultError("the body is a JSON object")
                    self.core.faults.configure(spec)
                    self.core.refresh()
                except (orjson.JSONDecodeError, FaultError) as e:
                    return self.error_reply(req, 400, "BadFaults", str(e))
            return Reply(200, _JSON, orjson.dumps(self.core.faults.describe()))
        if m == "POST" and path == "/reset":
            self.ns.reset()
            self.core.faults.clear()
            self.core.refresh()
            self.core.reset_stats()
            for reset in self._on_reset:
                reset()
            return Reply(200, _JSON, b'{"ok":true}')
        if m == "GET" and path in ("/", "/info"):
            return Reply(200, _JSON, orjson.dumps(self.info))
        handler = self._routes.get((m, path))
        if handler is not None:
            return handler(req)
        return self.error_reply(req, 404, "UnknownControlRequest",
                                f"no control request {m} {req.target[:200]}; see "
                                "committer/testing/cloud_sim/control.py")

    # -- statistics --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        out = self.core.stats.snapshot()
        out["stored"] = {"objects": self.ns.files, "directories": self.ns.dirs,
                         "buckets": len(self.ns.buckets)}
        out["connections"] = self.core.connections
        out["in_flight"] = self.core.timeline.in_flight
        bucket = self.core.bucket
        out["throttle"] = None if bucket is None else {
            "rate": bucket.rate, "capacity": bucket.capacity}
        out["latency"] = self.core.latency.describe()
        return out

    # -- objects -----------------------------------------------------------------------------

    def _etag(self, obj: Obj) -> str:
        return gcs_etag(GENERATION_BASE + obj.seq) if self.gcs else etag_of(obj)

    def _populate(self, req: Request) -> Reply:
        ns = self.ns
        results = req.params().get("results", "1") != "0"
        now = time.time()
        sizes: dict[int, int] = {}  # one int object per distinct size
        out: list[bytes] = []
        stored = errors = 0
        for number, line in enumerate(req.body.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                bucket = ns.ensure_bucket(str(rec["bucket"]))
                key = ns.normalize(str(rec["key"]))
                if not key:
                    raise ValueError("an empty key")
                data_b64 = rec.get("data_b64")
                if data_b64 is not None:
                    data = base64.b64decode(data_b64, validate=True)
                    obj = ns.new_file(data, len(data), now=now)
                else:
                    size = int(rec["size"])
                    if size < 0:
                        raise ValueError(f"a negative size {size}")
                    size = sizes.setdefault(size, size)
                    obj = Obj(ns.next_seq(), size, now, ns.random_sums(), None, None)
                if ns.hierarchical:
                    _, d = ns.lookup(bucket, key)
                    if d is not None:
                        raise PathConflict(f"a directory is at {key!r}")
                ns.put(bucket, key, obj)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error,
                    PathConflict) as e:
                errors += 1
                if results:
                    out.append(orjson.dumps({"error": f"line {number}: {type(e).__name__}: "
                                                      f"{e}"}))
                continue
            stored += 1
            if results:
                sums = obj.sums
                assert sums is not None
                out.append(orjson.dumps({
                    "etag": self._etag(obj), "md5": base64.b64encode(sums[:16]).decode(),
                    "generation": GENERATION_BASE + obj.seq,
                    "crc32c": base64.b64encode(sums[16:20]).decode()}))
        gc.freeze()
        if not results:
            return Reply(200, _NDJSON, orjson.dumps({"stored": stored, "errors": errors}) + b"\n")
        out.append(b"")
        return Reply(200, _NDJSON, b"\n".join(out))

    def _objects(self, req: Request) -> Reply:
        q = req.params()
        bucket = self.ns.bucket(q.get("bucket", ""))
        if bucket is None:
            return self.error_reply(req, 404, "NoSuchBucket", f"no bucket {q.get('bucket')!r}")
        out: list[bytes] = []
        for entry in self.ns.iterate(bucket, q.get("prefix", "")):
            obj = entry.obj
            assert obj is not None
            sums = obj.sums
            out.append(orjson.dumps({
                "key": entry.name, "size": obj.size, "etag": self._etag(obj),
                "md5": None if sums is None else base64.b64encode(sums[:16]).decode(),
                "generation": GENERATION_BASE + obj.seq, "is_dir": entry.is_dir}))
        out.append(b"")
        return Reply(200, _NDJSON, b"\n".join(out))


def rates_routes(rates: GcsRates) -> dict[tuple[str, str], Callable[[Request], Reply]]:
    """The control requests of a GCS account's bucket rates (see the module doc)."""

    def history(req: Request) -> Reply:
        return Reply(200, _JSON, orjson.dumps(rates.history(req.params().get("bucket", ""))))

    def clock(req: Request) -> Reply:
        try:
            spec = orjson.loads(req.body or b"{}")
            now = rates.advance(float(spec.get("advance_s", 0.0)))
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as e:
            return Reply(400, _JSON, orjson.dumps({"error": "BadClock", "message": str(e)}))
        return Reply(200, _JSON, orjson.dumps({"now": now}))

    return {("GET", "/gcs/rates"): lambda req: Reply(200, _JSON,
                                                     orjson.dumps(rates.describe())),
            ("GET", "/gcs/rates/history"): history,
            ("POST", "/gcs/clock"): clock}
