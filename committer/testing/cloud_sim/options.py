"""The simulator's options: one frozen record, its command line, and its parser."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["SERVICES", "SimOptions", "parse_args"]

#: adls: Blob + DFS over a hierarchical namespace; blob: a flat Blob account (its DFS port
#: refuses every request); gcs: the GCS JSON API
SERVICES = ("adls", "blob", "gcs")


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
            tls_cert=args.tls_cert, tls_key=args.tls_key)
    except ValueError as e:
        _parser().error(str(e))
    return options, args.parent_pid
