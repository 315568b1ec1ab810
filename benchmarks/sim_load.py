"""``python -m benchmarks.sim_load``: the cloud simulator's own CPU per request, at a rate.

Starts the simulator (``committer.testing.cloud_sim``) in its own process, populates the
account with content-less objects (timed; the simulator's peak RSS read after), then, for each
repetition, resets its statistics and drives one bulk operation at an open-loop rate over many
keep-alive connections for a while, and reads back what the simulator measured of itself: the
CPU seconds of its process (``getrusage``) per request served, the requests in flight (its
per-100 ms timeline), the statuses. The client is a raw asyncio protocol (uvloop when
importable) sending requests built and signed before the timed part, so the machine's CPU goes
to the simulator as far as possible; its own CPU is reported too.

Operations: ``rename`` (DFS rename within the directory, ``If-None-Match: *``), ``copy``
(Copy Blob, ``If-None-Match: *``), ``delete`` (Delete Blob / GCS DELETE), ``head`` (Get Blob
Properties), ``rewrite`` (GCS rewriteTo with ``ifGenerationMatch=0``), ``get`` (GCS object
metadata). Each request of a run names a different populated object, so a run needs
``rate x duration`` objects, and destructive runs use fresh ones each repetition.

    python -m benchmarks.sim_load --service adls --op rename --rate 20000 --duration 10 \\
        --objects 1000000 --repeat 3 [--manifests 1000 --manifest-kib 150]

Figures are noisy on a shared machine: compare CPU per request (the simulator's own), not wall
time, repeat, and read the load average recorded with them. The achieved rate is reported
beside the target: on a small machine the client may not reach it, and the simulator's CPU per
request falls as its rate rises (more events per wake-up of its event loop), so compare figures
at similar achieved rates.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import resource
import sys
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks.common import DEFAULT_OUT, machine, save_results, summarize
from committer.testing.cloud_sim import CloudSim, SimOptions
from committer.testing.cloud_sim.server import new_event_loop
from committer.testing.cloud_sim.shared_key import authorization
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

OPS = {"adls": ("rename", "copy", "delete", "head"), "blob": ("copy", "delete", "head"),
       "gcs": ("rewrite", "delete", "get")}
DESTRUCTIVE = frozenset({"rename", "copy", "delete", "rewrite"})
CONTAINER = "bench"
VERSION = "2025-11-05"


def object_key(i: int) -> str:
    """The populated objects: a thousand to a directory."""
    return f"src/p{i // 1000:04d}/f{i:07d}"


def _azure_request(method: str, path: str, query: Sequence[tuple[str, str]],
                   headers: dict[str, str], host: str, date: str) -> bytes:
    h = {"x-ms-date": date, "x-ms-version": VERSION, **headers}
    if method == "PUT":
        h["content-length"] = "0"
    h["authorization"] = authorization(AZURITE_ACCOUNT, AZURITE_KEY, method, path, query, h)
    target = path + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in h.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def build_requests(service: str, op: str, port: int, indices: range) -> list[bytes]:
    """The requests of one run, in order (signed, for Azure)."""
    host = f"127.0.0.1:{port}"
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    out = []
    acct = f"/{AZURITE_ACCOUNT}/{CONTAINER}/"
    for i in indices:
        key = object_key(i)
        if service == "gcs":
            obj = f"/storage/v1/b/{CONTAINER}/o/{quote(key, safe='')}"
            if op == "rewrite":
                dst = quote("dst/" + key[4:], safe="")
                line = f"POST {obj}/rewriteTo/b/{CONTAINER}/o/{dst}?ifGenerationMatch=0"
                extra = "Content-Length: 0\r\n"
            elif op == "delete":
                line, extra = f"DELETE {obj}", ""
            else:
                line, extra = f"GET {obj}", ""
            out.append(f"{line} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
        elif op == "rename":
            out.append(_azure_request("PUT", acct + key + ".r", [("mode", "legacy")],
                                      {"if-none-match": "*",
                                       "x-ms-rename-source": f"/{CONTAINER}/{key}"},
                                      host, date))
        elif op == "copy":
            source = f"http://{host}{acct}{key}"
            out.append(_azure_request("PUT", acct + "dst/" + key[4:], [],
                                      {"if-none-match": "*", "x-ms-copy-source": source},
                                      host, date))
        elif op == "delete":
            out.append(_azure_request("DELETE", acct + key, [], {}, host, date))
        else:
            out.append(_azure_request("HEAD", acct + key, [], {}, host, date))
    return out


class _Conn(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self, runner: _Runner) -> None:
        self.runner = runner
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.head = False
        self.started = 0.0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, payload: bytes, head: bool, now: float) -> None:
        self.head = head
        self.started = now
        assert self.transport is not None
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self.buf = buf
            return
        head = buf[:end]
        length = 0
        if not self.head:
            at = head.find(b"\r\nContent-Length: ")  # the simulator's spelling
            if at < 0:
                at = head.lower().find(b"\r\ncontent-length: ")
            if at >= 0:
                eol = head.find(b"\r\n", at + 2)
                length = int(head[at + 18:eol if eol >= 0 else len(head)])
        if len(buf) < end + 4 + length:
            self.buf = buf
            return
        self.buf = b""
        self.runner.done(self, int(head[9:12]), self.started)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.runner.lost(self)


class _Runner:
    def __init__(self, loop: asyncio.AbstractEventLoop, requests: list[bytes], head: bool,
                 rate: float) -> None:
        self.loop = loop
        self.requests = requests
        self.head = head
        self.rate = rate
        self.idle: list[_Conn] = []
        self.sent = 0
        self.received = 0
        self.statuses: dict[int, int] = {}
        self.latencies = array("d")
        self.max_backlog = 0
        self.lost_connections = 0
        self.finished = loop.create_future()
        self.t0 = 0.0

    def done(self, conn: _Conn, status: int, started: float) -> None:
        now = self.loop.time()
        self.received += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.latencies.append(now - started)
        self.idle.append(conn)
        self._pump(now)
        if self.received == len(self.requests) and not self.finished.done():
            self.finished.set_result(now)

    def lost(self, conn: _Conn) -> None:
        self.lost_connections += 1
        if conn in self.idle:
            self.idle.remove(conn)

    def _pump(self, now: float) -> None:
        due = min(len(self.requests), int((now - self.t0) * self.rate) + 1)
        idle = self.idle
        while self.sent < due and idle:
            conn = idle.pop()
            conn.send(self.requests[self.sent], self.head, now)
            self.sent += 1
        backlog = due - self.sent
        self.max_backlog = max(self.max_backlog, backlog)

    def tick(self) -> None:
        if self.sent < len(self.requests):
            self._pump(self.loop.time())
            self.loop.call_later(0.0005, self.tick)


async def _drive(port: int, requests: list[bytes], head: bool, rate: float,
                 connections: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    runner = _Runner(loop, requests, head, rate)
    for _ in range(connections):
        _, conn = await loop.create_connection(lambda: _Conn(runner), "127.0.0.1", port)
        runner.idle.append(conn)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    runner.t0 = loop.time()
    runner.tick()
    end = await asyncio.wait_for(runner.finished, timeout=len(requests) / rate + 120)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    for conn in list(runner.idle):
        if conn.transport is not None:
            conn.transport.close()
    elapsed = end - runner.t0
    lat = sorted(runner.latencies)
    return {
        "requests": len(requests), "elapsed_s": round(elapsed, 3),
        "achieved_rate": round(len(requests) / elapsed, 1),
        "statuses": {str(k): v for k, v in sorted(runner.statuses.items())},
        "client_latency_ms": {"p50": round(lat[len(lat) // 2] * 1000, 2),
                              "p99": round(lat[int(len(lat) * 0.99)] * 1000, 2),
                              "max": round(lat[-1] * 1000, 2)},
        "client_max_backlog": runner.max_backlog,
        "client_cpu_s": round(cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime,
                              3),
        "lost_connections": runner.lost_connections,
    }


def _in_flight(timeline: dict[str, Any], trim_s: float = 1.0) -> dict[str, float]:
    """Requests in flight over the steady part of a run (its first and last second cut)."""
    buckets = [b for b in timeline["buckets"] if b["arrivals"] or b["responses"]]
    width = timeline["bucket_s"]
    cut = int(trim_s / width)
    steady = buckets[cut:-cut] if len(buckets) > 2 * cut + 2 else buckets
    if not steady:
        return {"mean": 0.0, "max": 0.0}
    return {"mean": round(sum(b["mean_in_flight"] for b in steady) / len(steady), 1),
            "max": float(max(b["max_in_flight"] for b in steady))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    count = int(args.rate * args.duration)
    runs_needing = args.repeat if args.op in DESTRUCTIVE else 1
    if count * runs_needing > args.objects:
        raise SystemExit(f"{args.repeat} runs of {count} {args.op} requests need "
                         f"{count * runs_needing} objects; --objects is {args.objects}")
    options = SimOptions(service=args.service, latency_ms=args.latency_ms, p99_ms=args.p99_ms,
                         seed=args.seed, verify_signatures=not args.no_verify_signatures)
    params = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result: dict[str, Any] = {"machine": machine(), "params": params, "runs": []}
    with CloudSim(options) as sim:
        t = time.perf_counter()
        stored = sim.populate_count({"bucket": CONTAINER, "key": object_key(i), "size": 1000}
                                    for i in range(args.objects))
        populate_s = time.perf_counter() - t
        cpu_objects = sim.stats()["cpu"]
        manifest_bytes = 0
        if args.manifests:
            body = base64.b64encode(os.urandom(args.manifest_kib * 1024)).decode()
            t = time.perf_counter()
            stored += sim.populate_count(
                {"bucket": CONTAINER, "key": f"manifests/m{i:06d}.json", "data_b64": body}
                for i in range(args.manifests))
            manifest_s = time.perf_counter() - t
            manifest_bytes = args.manifests * args.manifest_kib * 1024
        after = sim.stats()
        if stored != args.objects + args.manifests:
            raise SystemExit(f"populated {stored} objects, not {args.objects + args.manifests}")
        result["populate"] = {
            "objects": args.objects, "seconds": round(populate_s, 2),
            "sim_cpu_s": round(cpu_objects["process_user_s"] + cpu_objects["process_system_s"],
                               2),
            "manifests": args.manifests, "manifest_mib": round(manifest_bytes / 2**20, 1),
            "manifest_seconds": round(manifest_s, 2) if args.manifests else 0.0,
                              "sim_peak_rss_mib": round(after["memory_kib"]["peak_rss"] / 1024, 1),
                              "sim_rss_mib": round(after["memory_kib"]["rss"] / 1024, 1),
                              "stored": after["stored"]}
        print(f"populated {args.objects} objects in {populate_s:.1f}s (simulator CPU "
              f"{result['populate']['sim_cpu_s']}s) and {args.manifests} manifests "
              f"({result['populate']['manifest_mib']} MiB); simulator peak RSS "
              f"{result['populate']['sim_peak_rss_mib']} MiB", file=sys.stderr)
        port = sim.ports["gcs" if args.service == "gcs" else
                         ("dfs" if args.op == "rename" else "blob")]
        for rep in range(args.repeat):
            first = rep * count if args.op in DESTRUCTIVE else 0
            requests = build_requests(args.service, args.op, port, range(first, first + count))
            load_before = os.getloadavg()
            sim.reset_stats()
            loop = new_event_loop()
            try:
                client = loop.run_until_complete(_drive(port, requests, args.op in ("head",),
                                                        args.rate, args.connections))
            finally:
                loop.close()
            stats = sim.stats()
            timeline = sim.timeline()
            served = stats["requests"]
            cpu = stats["cpu"]["total_s"]
            one = {
                "rep": rep, "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "client": client, "sim_requests": served,
                "sim_cpu_s": cpu, "sim_user_s": stats["cpu"]["user_s"],
                "sim_system_s": stats["cpu"]["system_s"],
                "sim_cpu_us_per_request": round(cpu / served * 1e6, 2) if served else None,
                "sim_cpu_cores": round(cpu / client["elapsed_s"], 3),
                "sim_by_status": stats["by_status"], "in_flight": _in_flight(timeline),
                "sim_peak_rss_mib": round(stats["memory_kib"]["peak_rss"] / 1024, 1),
                "connections": stats["connections"],
            }
            result["runs"].append(one)
            print(f"rep {rep}: {client['achieved_rate']:.0f} req/s, simulator "
                  f"{one['sim_cpu_us_per_request']} us CPU/request "
                  f"({one['sim_cpu_cores']} cores), in flight mean "
                  f"{one['in_flight']['mean']} max {one['in_flight']['max']}, statuses "
                  f"{client['statuses']}, client CPU {client['client_cpu_s']}s, load "
                  f"{one['load_average_before'][0]}", file=sys.stderr)
    per_request = [r["sim_cpu_us_per_request"] for r in result["runs"]
                   if r["sim_cpu_us_per_request"] is not None]
    result["summary"] = {"sim_cpu_us_per_request": summarize(per_request) if per_request
                         else None}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--service", choices=sorted(OPS), default="adls")
    p.add_argument("--op", default=None, help="operation (default: the service's first): "
                   + "; ".join(f"{s}: {', '.join(o)}" for s, o in OPS.items()))
    p.add_argument("--rate", type=float, default=20000.0, help="requests per second")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    p.add_argument("--connections", type=int, default=700)
    p.add_argument("--objects", type=int, default=1_000_000, help="objects populated")
    p.add_argument("--manifests", type=int, default=0,
                   help="also populate this many objects with bytes (manifests)")
    p.add_argument("--manifest-kib", type=int, default=150, help="bytes of each manifest")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--p99-ms", type=float, default=200.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-verify-signatures", action="store_true")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.op is None:
        args.op = OPS[args.service][0]
    if args.op not in OPS[args.service]:
        p.error(f"--op {args.op} is not one of {OPS[args.service]} for {args.service}")
    result = run(args)
    path = save_results(args.out, f"sim-load-{args.service}-{args.op}", result)
    print(f"results: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
