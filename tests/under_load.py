"""Run a command beside CPU-bound processes, for its whole run: the suite as CI's shared
two-core machine often sees it.

    python -m tests.under_load [--burners 2] -- make test

The burners are plain busy loops in processes of their own (no nice level: they compete with
the suite as other jobs on the machine would). They start before the command and are killed
when it ends, however it ends; the command's exit status is this one's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

# A busy loop that also ends itself if its parent is gone (a SIGKILLed harness leaves none).
_BURN = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "n = 0\n"
    "while True:\n"
    "    n += 1\n"
    "    if n % 5_000_000 == 0 and os.getppid() != parent:\n"
    "        break\n"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.under_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burners", type=int, default=2,
                        help="CPU-bound processes beside the command (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    burners = [subprocess.Popen([sys.executable, "-c", _BURN, str(os.getpid())],
                                stdin=subprocess.DEVNULL)
               for _ in range(args.burners)]
    started = time.monotonic()
    print(f"under_load: {len(burners)} CPU-bound processes beside: {' '.join(command)}",
          flush=True)
    # A signal to the harness ends the command too, then the burners (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        status = subprocess.call(command)
    except KeyboardInterrupt:
        status = 130
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
    print(f"under_load: exit status {status} after {time.monotonic() - started:.0f} s "
          f"beside {len(burners)} CPU-bound processes", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
