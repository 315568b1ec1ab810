"""``python -m committer.testing.cloud_sim --service adls|blob|gcs [options]``.

Binds 127.0.0.1 ports the kernel picks (the data ports of the service, and the control
port), prints ONE JSON line ``{"service", "blob"|"dfs"|"gcs": port..., "control": port,
"pid"}`` on stdout when ready, then serves until:

- SIGTERM or SIGINT;
- the end of its standard input, when that is a pipe (:class:`CloudSim` keeps one open, so a
  parent that dies by any means closes it);
- on Linux, the death of ``--parent-pid``: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` set by the
  simulator itself, then a check that the parent is still the one named (it may have died
  before the call). As with ``committer/testing/emulators.py``, which sets the same signal on
  its children (from the parent, between fork and exec), the signal follows the *thread* that
  started the process: :class:`CloudSim` passes ``--parent-pid`` only from the main thread.

uvloop drives the event loop when it is importable (the ``bench`` extra), asyncio's own
otherwise.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import os
import resource
import signal
import ssl
import stat
import sys
from typing import Any

from committer.testing.cloud_sim.azure_blob import BlobService
from committer.testing.cloud_sim.azure_dfs import DfsService
from committer.testing.cloud_sim.control import ControlService, rates_routes
from committer.testing.cloud_sim.faults import Faults
from committer.testing.cloud_sim.gcs_folders import GcsFolders
from committer.testing.cloud_sim.gcs_json import GcsService
from committer.testing.cloud_sim.gcs_rates import GcsRates
from committer.testing.cloud_sim.latency import Latency
from committer.testing.cloud_sim.namespace import Namespace
from committer.testing.cloud_sim.options import SimOptions, parse_args
from committer.testing.cloud_sim.server import (
    Core,
    HttpProtocol,
    Service,
    WorkQueue,
    new_event_loop,
)
from committer.testing.cloud_sim.shared_key import SharedKeyVerifier
from committer.testing.cloud_sim.throttle import TokenBucket
from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


def _follow_parent(parent_pid: int) -> None:
    """Get SIGTERM when the parent dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        sys.exit(f"cloud_sim: parent {parent_pid} is gone")


def _raise_fd_limit() -> None:
    """Thousands of keep-alive connections need more descriptors than a default soft limit."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (
                hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard))
    except (ValueError, OSError):
        pass


def gcs_rates(options: SimOptions, core: Core) -> GcsRates | None:
    """A GCS account's bucket rates and per-object write limit (``gcs_rates.py``), when the
    options ask for either: a cold bucket, or a per-object limit on a warm one."""
    if options.service != "gcs" or (options.gcs_bucket == "warm" and not options.object_rate):
        return None
    return GcsRates(core.loop.time, time_scale=options.gcs_time_scale,
                    burst_s=options.burst_s, max_rate=options.ops_limit,
                    object_rate=options.object_rate, manual=options.gcs_manual_clock,
                    ramps=options.gcs_bucket == "cold")


def build_services(options: SimOptions, core: Core, ns: Namespace,
                   rates: GcsRates | None = None) -> dict[str, Service]:
    """The data services of ``options.service``, by port name."""
    services: dict[str, Service]
    if options.service == "gcs":
        gcs = GcsService(core, ns, move=options.gcs_move, rates=rates)
        GcsFolders(gcs)  # buckets with a hierarchical namespace: folders, their rename
        services = {"gcs": gcs}
    else:
        verifier = (SharedKeyVerifier(AZURITE_ACCOUNT, AZURITE_KEY)
                    if options.verify_signatures else None)
        services = {"blob": BlobService(core, ns, AZURITE_ACCOUNT, verifier),
                    "dfs": DfsService(core, ns, AZURITE_ACCOUNT, verifier)}
    for svc in services.values():
        svc.bearer_token = options.bearer_token
    return services


async def serve(options: SimOptions, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    ns = Namespace(hierarchical=options.service == "adls", seed=options.seed)
    ns.hns_buckets = options.service == "gcs" and options.gcs_hns
    latency = Latency(options.latency_ms, options.p99_ms, options.seed)
    # a cold GCS bucket's rates are its own (gcs_rates.py); ops_limit is then their ceiling
    cold = options.service == "gcs" and options.gcs_bucket == "cold"
    bucket = (TokenBucket(options.ops_limit, options.burst_s, loop.time())
              if options.ops_limit > 0 and not cold else None)
    core = Core(loop, latency, bucket, Faults(options.seed),
                retry_after_s=options.retry_after_s,
                queue=WorkQueue(options.serve_rate) if options.serve_rate else None)
    rates = gcs_rates(options, core)
    services = build_services(options, core, ns, rates)
    tls = None
    if options.tls_cert is not None and options.tls_key is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(options.tls_cert, options.tls_key)
    ready: dict[str, Any] = {"service": options.service}
    servers = []
    for name, svc in services.items():
        server = await loop.create_server(lambda s=svc: HttpProtocol(core, s),
                                          HOST, 0, backlog=4096, ssl=tls)
        servers.append(server)
        ready[name] = server.sockets[0].getsockname()[1]
    info = {"options": options.__dict__, "ports": dict(ready)}
    control = ControlService(core, ns, gcs=options.service == "gcs", info=info)
    if rates is not None:
        control.extend(rates_routes(rates), on_reset=rates.reset)
    server = await loop.create_server(lambda: HttpProtocol(core, control), HOST, 0,
                                      backlog=256)
    servers.append(server)
    ready["control"] = server.sockets[0].getsockname()[1]
    ready["pid"] = os.getpid()
    info["ports"] = dict(ready)
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    await stop.wait()
    for s in servers:
        s.close()


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Stop at the end of standard input when it is a pipe (the parent holds its other end)."""
    try:
        if not stat.S_ISFIFO(os.fstat(0).st_mode):
            return
    except OSError:
        return

    def readable() -> None:
        try:
            chunk = os.read(0, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            loop.remove_reader(0)
            stop.set()

    loop.add_reader(0, readable)


def main(argv: list[str] | None = None) -> int:
    options, parent_pid = parse_args(argv)
    if parent_pid is not None:
        _follow_parent(parent_pid)
    _raise_fd_limit()
    # The per-request path makes few reference cycles, but the records it keeps (a rewrite's
    # new object) count towards the collector's thresholds, and each full collection walks
    # every record kept since the last population (frozen then): at the default of 700 it
    # took 2-5% of the simulator's CPU at 20,000 requests a second.
    gc.set_threshold(100_000, 20, 20)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    _watch_stdin(loop, stop)
    try:
        loop.run_until_complete(serve(options, stop))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
