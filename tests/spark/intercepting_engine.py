"""The engine process of :func:`tests.spark.helpers.intercepting_engine` (test harness only).

    python -m tests.spark.intercepting_engine DIRECTORY

Serves the shim exactly as ``python -m committer.spark.driver --serve`` does, and also: appends
every request to ``DIRECTORY/requests.jsonl``; before a job commit, runs the functions of
:mod:`tests.spark.engine_hooks` that ``DIRECTORY/hooks.json`` names (``before_commit``, and
``replace_commit`` whose answer is sent instead of committing); exits once ``DIRECTORY/stop``
exists, after the requests it runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from committer.spark.driver import server_on_own_pipes
from committer.spark.engine import error_response, handle
from tests.spark import engine_hooks


def _handler(directory: Path) -> Any:
    lock = threading.Lock()

    def run(request: dict[str, Any]) -> dict[str, Any]:
        with lock, open(directory / "requests.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(request) + "\n")
        try:
            if request.get("operation") == "commitJob":
                path = directory / "hooks.json"
                hooks = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
                if hooks.get("before_commit"):
                    getattr(engine_hooks, hooks["before_commit"])(request, directory)
                if hooks.get("replace_commit"):
                    answer: dict[str, Any] = getattr(engine_hooks, hooks["replace_commit"])(
                        request, directory)
                    return answer
        except Exception as exc:  # the shim waits for an answer; a broken hook fails the job
            return error_response(exc)
        return handle(request)

    return run


def main(argv: list[str]) -> int:
    directory = Path(argv[0])
    (directory / "started").touch()
    server = server_on_own_pipes(_handler(directory))

    def stop_when_asked() -> None:
        while not (directory / "stop").exists():
            time.sleep(0.05)
        server.drain()
        (directory / "stopped").touch()
        os._exit(0)

    threading.Thread(target=stop_when_asked, daemon=True).start()
    return server.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
