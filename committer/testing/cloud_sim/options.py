"""The simulator's options: one frozen record, its command line, and its parser."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["GCS_BUCKETS", "SERVICES", "SimOptions", "parse_args"]

#: adls: Blob + DFS over a hierarchical namespace; blob: a flat Blob account (its DFS port
#: refuses every request); gcs: the GCS JSON API
SERVICES = ("adls", "blob", "gcs")
#: the GCS bucket's rate model: warm, the account's flat ``ops_limit`` (the model every GCS
#: figure before issue 46 used); cold, a bucket as Google documents a new one
#: (``gcs_rates.py``: 1,000 writes and 5,000 reads a second, ramping with sustained load, one
#: write a second per object name)
GCS_BUCKETS = ("warm", "cold")


@dataclass(frozen=True)
class SimOptions:
    service: str = "adls"
    #: median and 99th percentile of the response delay; 0 = none
    latency_ms: float = 20.0
    p99_ms: float = 200.0
    #: requests per second of the account's token bucket; 0 = unlimited
    ops_limit: float = 0.0
    #: the bucket's capacity, in seconds of its rate
    burst_s: float = 0.25
    #: the Retry-After sent when throttled; None: computed from the bucket
    retry_after_s: int | None = None
    #: operations a second the service works through one after another (a request waits for
    #: those ahead of it: a latency that rises with the load); 0 = no queue
    serve_rate: float = 0.0
    seed: int | None = None
    #: serve the GCS objects move API (fake-gcs-server refuses it: 400)
    gcs_move: bool = False
    verify_signatures: bool = True
    #: when set, a bearer token is accepted only if it is this one (401 otherwise): a test of
    #: a token provider proves the token it fetched was the one sent
    bearer_token: str | None = None
    #: serve the data ports over HTTPS with this certificate chain and key (PEM files; the
    #: control port stays plain HTTP)
    tls_cert: str | None = None
    tls_key: str | None = None
    #: GCS: the bucket's rate model (``GCS_BUCKETS``); cold: ``ops_limit`` is the ceiling its
    #: ramp stops at (0: none) and ``burst_s`` the seconds of its rates a bucket holds
    gcs_bucket: str = "warm"
    #: GCS, cold: the ramp's 20 minutes of doubling divided by this (the rates are not scaled)
    gcs_time_scale: float = 1.0
    #: GCS: writes a second to one object name (None: the model's, 1 when cold, none when
    #: warm; 0: none)
    gcs_object_rate: float | None = None
    #: GCS, cold: the rate model's clock moves only when the control API advances it
    #: (deterministic tests), not with time
    gcs_manual_clock: bool = False
    #: GCS: every bucket has a hierarchical namespace (folders, their atomic rename); a
    #: bucket created with ``hierarchicalNamespace.enabled`` has one anyway
    gcs_hns: bool = False

    def __post_init__(self) -> None:
        if self.service not in SERVICES:
            raise ValueError(f"service must be one of {SERVICES}, not {self.service!r}")
        if self.latency_ms < 0 or self.p99_ms < 0:
            raise ValueError("latency must not be negative")
        if self.latency_ms > 0 and self.p99_ms < self.latency_ms:
            raise ValueError(f"p99_ms ({self.p99_ms}) is below latency_ms ({self.latency_ms})")
        if self.ops_limit < 0 or self.burst_s <= 0:
            raise ValueError("ops_limit must be >= 0 and burst_s > 0")
        if self.serve_rate < 0:
            raise ValueError("serve_rate must be >= 0")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError("retry_after_s must not be negative")
        if self.gcs_bucket not in GCS_BUCKETS:
            raise ValueError(f"gcs_bucket must be one of {GCS_BUCKETS}, not {self.gcs_bucket!r}")
        if self.gcs_time_scale <= 0:
            raise ValueError("gcs_time_scale must be positive")
        if self.gcs_object_rate is not None and self.gcs_object_rate < 0:
            raise ValueError("gcs_object_rate must not be negative")

    @property
    def object_rate(self) -> float:
        """Writes a second to one object name on GCS (0: no limit)."""
        if self.gcs_object_rate is not None:
            return self.gcs_object_rate
        return 1.0 if self.gcs_bucket == "cold" else 0.0

    def argv(self) -> list[str]:
        """The command-line arguments that give these options."""
        out = ["--service", self.service, "--latency-ms", repr(self.latency_ms),
               "--p99-ms", repr(self.p99_ms), "--ops-limit", repr(self.ops_limit),
               "--burst-s", repr(self.burst_s)]
        if self.retry_after_s is not None:
            out += ["--retry-after-s", str(self.retry_after_s)]
        if self.serve_rate:
            out += ["--serve-rate", repr(self.serve_rate)]
        if self.seed is not None:
            out += ["--seed", str(self.seed)]
        if self.gcs_move:
            out.append("--gcs-move")
        if not self.verify_signatures:
            out.append("--no-verify-signatures")
        if self.bearer_token is not None:
            out += ["--bearer-token", self.bearer_token]
        if self.tls_cert is not None and self.tls_key is not None:
            out += ["--tls-cert", self.tls_cert, "--tls-key", self.tls_key]
        if self.gcs_bucket != "warm":
            out += ["--gcs-bucket", self.gcs_bucket]
        if self.gcs_time_scale != 1.0:
            out += ["--gcs-time-scale", repr(self.gcs_time_scale)]
        if self.gcs_object_rate is not None:
            out += ["--gcs-object-rate", repr(self.gcs_object_rate)]
        if self.gcs_manual_clock:
            out.append("--gcs-manual-clock")
        if self.gcs_hns:
            out.append("--gcs-hns")
        return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m committer.testing.cloud_sim",
        description="A simulated cloud storage account (Azure Blob + DFS, or GCS JSON API) "
                    "on 127.0.0.1, with a latency model and an account throttle. Prints one "
                    "JSON line with its ports when ready; serves until SIGTERM/SIGINT, the end "
                    "of its standard input (when that is a pipe), or its parent's death.")
    p.add_argument("--service", choices=SERVICES, default="adls")
    p.add_argument("--latency-ms", type=float, default=20.0,
                   help="median response delay (0: none; default 20)")
    p.add_argument("--p99-ms", type=float, default=200.0,
                   help="99th percentile of the delay (default 200)")
    p.add_argument("--ops-limit", type=float, default=0.0,
                   help="account requests per second (token bucket); 0 = unlimited")
    p.add_argument("--burst-s", type=float, default=0.25,
                   help="bucket capacity in seconds of the rate (default 0.25)")
    p.add_argument("--retry-after-s", type=int, default=None,
                   help="Retry-After value to send (default: computed from the bucket)")
    p.add_argument("--serve-rate", type=float, default=0.0,
                   help="operations per second the service works through one after another: "
                        "a request waits for those ahead of it, so latency rises with the "
                        "load (0 = no queue)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--gcs-move", action="store_true",
                   help="serve the GCS objects move API (default: 400, as fake-gcs-server)")
    p.add_argument("--no-verify-signatures", action="store_true",
                   help="accept any SharedKey signature")
    p.add_argument("--bearer-token", default=None,
                   help="the only bearer token accepted (default: any, on presence)")
    p.add_argument("--tls-cert", default=None,
                   help="serve the data ports over HTTPS with this PEM certificate chain")
    p.add_argument("--tls-key", default=None, help="the PEM private key of --tls-cert")
    p.add_argument("--gcs-bucket", choices=GCS_BUCKETS, default="warm",
                   help="GCS: warm (the flat --ops-limit) or cold (1,000 writes and 5,000 reads "
                        "a second, ramping with sustained load, as Google documents a new "
                        "bucket; --ops-limit is then the ramp's ceiling)")
    p.add_argument("--gcs-time-scale", type=float, default=1.0,
                   help="GCS, cold: run the ramp this many times faster (20 minutes a "
                        "doubling / scale; the rates are not scaled)")
    p.add_argument("--gcs-object-rate", type=float, default=None,
                   help="GCS: writes a second to one object name (default: 1 when cold, no "
                        "limit when warm; 0: no limit)")
    p.add_argument("--gcs-manual-clock", action="store_true",
                   help="GCS, cold: the rate model's clock moves only when POST /gcs/clock "
                        "advances it (tests)")
    p.add_argument("--gcs-hns", action="store_true",
                   help="GCS: every bucket has a hierarchical namespace (folders)")
    p.add_argument("--parent-pid", type=int, default=None,
                   help="exit when this process (the parent) dies (Linux: PR_SET_PDEATHSIG)")
    return p


def parse_args(argv: list[str] | None = None) -> tuple[SimOptions, int | None]:
    """The options and the parent pid to follow, from the command line."""
    args = _parser().parse_args(argv)
    try:
        options = SimOptions(
            service=args.service, latency_ms=args.latency_ms, p99_ms=args.p99_ms,
            ops_limit=args.ops_limit, burst_s=args.burst_s, retry_after_s=args.retry_after_s,
            serve_rate=args.serve_rate,
            seed=args.seed, gcs_move=args.gcs_move,
            verify_signatures=not args.no_verify_signatures, bearer_token=args.bearer_token,
            tls_cert=args.tls_cert, tls_key=args.tls_key, gcs_bucket=args.gcs_bucket,
            gcs_time_scale=args.gcs_time_scale, gcs_object_rate=args.gcs_object_rate,
            gcs_manual_clock=args.gcs_manual_clock, gcs_hns=args.gcs_hns)
    except ValueError as e:
        _parser().error(str(e))
    return options, args.parent_pid
