"""Subprocess entry point of the job engine: ``python -m committer.spark.driver``.

The JVM shim starts this when no in-process engine is registered (a JVM application, ``spark-sql``,
a driver started without :func:`committer.spark.configure`). The request JSON arrives on standard
input — it carries configuration and store credentials, so it is never put on the command line —
and the response JSON is written to standard output. The exit status is 0 on success and 1 when
the operation failed (the response then carries the engine's message, which fails the Spark job).
Logs go to standard error, which the shim reports if the process dies without a response.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from typing import Any, TextIO

from committer.spark.engine import RequestError, error_response, handle

__all__ = ["main"]


def run(stdin: TextIO, stdout: TextIO) -> int:
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


def main() -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The JVM writes UTF-8 whatever the locale; read it as such.
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")
    return run(stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
