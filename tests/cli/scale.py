"""Build a large job attempt directory for measuring ``inspect`` and ``validate`` at scale.

    .venv/bin/python -m tests.cli.scale /tmp/mc-scale --tasks 1000 --files 1000

writes ``<root>/dest/_temporary/manifest_scale/00`` with ``tasks x files`` real (sparse) source
files in 100 partitions and one committed manifest per task, whose sizes and etags match the
files, so ``validate`` does every check including the store comparison. Used by docs/cli.md's
measurements and by the scale test (at a smaller size).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import orjson

from committer.layout import JobLayout
from committer.store.local import file_etag
from manifest_schema import TASK_MANIFEST_TYPE
from manifest_schema.uris import location_to_uri

JOB_ID = "scale"


def build(root: Path, tasks: int, files: int, partitions: int = 100) -> JobLayout:
    dest = root / "dest"
    layout = JobLayout(str(dest), JOB_ID)
    Path(layout.manifests_dir).mkdir(parents=True, exist_ok=True)
    for t in range(tasks):
        task_id = f"task_{JOB_ID}_m_{t:06d}"
        attempt_id = f"attempt_{JOB_ID}_m_{t:06d}_0"
        work = Path(layout.task_attempt_dir(attempt_id))
        entries = []
        dirs = set()
        for f in range(files):
            part = f"part={f % partitions:03d}"
            rel = f"{part}/file-{t:06d}-{f:05d}.bin"
            src = work / rel
            if f < partitions:
                src.parent.mkdir(parents=True, exist_ok=True)
                dirs.add(part)
            fd = os.open(src, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, 100 + (t * 7 + f) % 900)  # sparse: sizes without writing data
                st = os.fstat(fd)
            finally:
                os.close(fd)
            entries.append({"s": location_to_uri(str(src)),
                            "d": location_to_uri(f"{dest}/{rel}"), "z": st.st_size,
                            "e": file_etag(st)})
        manifest = {
            "type": TASK_MANIFEST_TYPE, "version": 1, "jobId": JOB_ID, "jobAttemptNumber": 0,
            "taskID": task_id, "taskAttemptID": attempt_id,
            "taskAttemptDir": location_to_uri(str(work)), "files": entries,
            "directories": [{"d": location_to_uri(f"{dest}/{d}"), "t": 1, "l": 1}
                            for d in sorted(dirs)],
            "iostatistics": {"counters": {"task_stage_commit": 1}}, "extraData": {},
        }
        Path(layout.manifest_path(task_id)).write_bytes(orjson.dumps(manifest))
    return layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--files", type=int, default=1000, help="files per task")
    args = parser.parse_args()
    layout = build(args.root, args.tasks, args.files)
    print(layout.attempt_dir)


if __name__ == "__main__":
    main()
