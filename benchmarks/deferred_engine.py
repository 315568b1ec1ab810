"""An engine process that sets jobs up as the real one does but leaves job commit undone, for
Hadoop's committer to do on the same manifests (``benchmarks/spark_write.py``).

    python -m benchmarks.deferred_engine JOB_IDS_FILE

Each job commit it is asked for appends the job's id to ``JOB_IDS_FILE`` and answers success.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from committer.spark.driver import server_on_own_pipes
from committer.spark.engine import handle


def main(argv: list[str]) -> int:
    job_ids = Path(argv[0])
    lock = threading.Lock()

    def run(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("operation") != "commitJob":
            return handle(request)
        with lock, open(job_ids, "a", encoding="utf-8") as out:
            out.write(f"{request['jobId']}\n")
        return {"ok": True, "result": {}}

    return server_on_own_pipes(run).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
