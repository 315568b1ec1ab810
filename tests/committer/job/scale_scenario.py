"""A 40,000-file job commit for the crash test at scale, and the child that commits it and dies
by SIGKILL after a chosen store call (test harness only).

The staged job (400 tasks x 100 files, with or without etags in its manifests) is generated once
as a template; each kill point gets a copy made of hard links (the same inodes, so the local
identities the manifests or the listing record stay true) with the manifests' paths rewritten.
A snapshot then names each data file by its inode: "exactly new" means every destination file
is the very file a task wrote, and "exactly old" that the destination holds what it held.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.jobtree import Shape, generate
from committer import JobCommitter
from committer.store import ManagedStore
from manifest_schema.uris import location_to_uri
from tests.committer.helpers import fast_config
from tests.committer.job.crash_scenario import CountingLocalStore, crash_after

TASKS, FILES_PER_TASK, PARTITIONS = 400, 100, 10
EXISTING = {"p=0/old-0.dat": b"old zero", "p=3/sub/old-3.dat": b"old three", "top.csv": b"t"}


def shape(dest: Path, etags: bool) -> Shape:
    return Shape(str(dest), TASKS, FILES_PER_TASK, PARTITIONS, job_id="scale0001", etags=etags)


def template(root: Path, etags: bool) -> Path:
    """Generate the staged job once under ``root/template/dest``; returns that destination."""
    dest = root / "template" / "dest"
    generate(shape(dest, etags))
    for rel, data in EXISTING.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    (dest / "_SUCCESS").write_bytes(b'{"jobId": "job_previous"}')
    return dest


def copy(template_dest: Path, dest: Path) -> None:
    """The template's job at ``dest``: the tree hard-linked (``cp -al``: the same inodes), then
    the manifests replaced by copies with the paths rewritten. The pre-existing files are links
    too: an append never writes to them, and a snapshot would show them changed if it did."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(template_dest), str(dest)], check=True)
    old_uri = location_to_uri(str(template_dest)).encode()
    new_uri = location_to_uri(str(dest)).encode()
    manifests = Path(shape(dest, True).layout.manifests_dir)
    for path in manifests.iterdir():
        data = path.read_bytes().replace(old_uri, new_uri)
        path.unlink()  # a link to the template's manifest: replaced, not written through
        path.write_bytes(data)


def remove(root: Path) -> None:
    subprocess.run(["rm", "-rf", str(root)], check=True)


def snapshot(dest: Path) -> dict[str, Any]:
    """Every file (a job's data file by inode, the rest by bytes) and directory below
    ``dest``, minus the committer's scratch space; ``_SUCCESS`` reduced to whose it is."""
    out: dict[str, Any] = {}
    cut = len(str(dest)) + 1
    for here, dirs, files in os.walk(dest):
        rel_here = here[cut:]
        if rel_here.split("/", 1)[0] in ("_temporary", "_manifest_committer"):
            dirs[:] = []
            continue
        for d in dirs:
            if rel_here or d not in ("_temporary", "_manifest_committer"):
                out[os.path.join(rel_here, d) + "/"] = None
        for name in files:
            rel = os.path.join(rel_here, name)
            path = os.path.join(here, name)
            if name.endswith(".dat") and name.startswith("part-"):
                out[rel] = os.lstat(path).st_ino
            else:
                with open(path, "rb") as f:
                    data = f.read()
                out[rel] = data[:200] if name != "_SUCCESS" else (b"job_previous" in data)
    history = dest / "_manifest_committer" / "history"
    out["history"] = sorted(os.listdir(history)) if history.is_dir() else []
    return out


def committer_for(dest: Path, store: ManagedStore | None = None) -> JobCommitter:
    return JobCommitter(str(dest), "scale0001", config=fast_config(), store=store)


def child_main(dest: str, crash_at: int | None) -> None:
    """Entry point of a forked child: commit the job, dying by SIGKILL after ``crash_at``
    store calls; an uninterrupted commit writes its number of store calls to ``ops.txt``."""
    counting = CountingLocalStore(crash_after(crash_at) if crash_at is not None else None)
    config = fast_config()
    committer_for(Path(dest), ManagedStore(counting, config)).commit()
    Path(dest).parent.joinpath("ops.txt").write_text(str(counting.ops))
