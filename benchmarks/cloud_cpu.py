"""Engine CPU per committed file on the cloud paths, the service in another process.

For each service: the ADLS Gen2 stub with a hierarchical namespace (Data Lake rename;
``committer.testing.adls_stub`` run as its own process), Azurite (flat Blob: Copy Blob +
Delete) and fake-gcs-server (rewrite + delete), a job of ``--tasks`` x ``--files-per-task``
files is written and task-committed through the Python task side, then ``JobCommitter.commit``
runs in a fresh interpreter (imports warmed before the clock starts, as in a long-running
driver) and the CPU the committing process spends (``getrusage``: every thread of it, the
request loop included) is divided by the files committed. The service's CPU is its own
process's and is not counted.

``--baseline-dir DIR`` also runs each trial with the engine code of another checkout (a
``git worktree`` of an earlier commit, say) on the same prepared job kind, alternating with
the current code, so that before and after are measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, markdown_table, summarize

NAME = "cloud-cpu"
TITLE = "Engine CPU per committed file on the cloud paths (service in its own process)"
SERVICES = ("adls", "azurite", "gcs")


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--services", default=",".join(SERVICES),
                        help="comma-separated: adls (ADLS Gen2 stub), azurite, gcs")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--files-per-task", type=int, default=100)
    parser.add_argument("--cpu-repeats", type=int, default=3)
    parser.add_argument("--baseline-dir", type=Path, default=None,
                        help="a checkout whose engine code is measured beside this one")


@contextmanager
def _service(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(scheme, storage options)`` of a fresh service of ``kind``, in its own process."""
    from committer.testing.emulators import start_azurite, start_fake_gcs_server

    if kind == "adls":
        proc = subprocess.Popen([sys.executable, "-m", "committer.testing.adls_stub"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                text=True)
        try:
            assert proc.stdout is not None
            ready = json.loads(proc.stdout.readline())
            yield "abfs", ready["storage_options"]
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)
        return
    emulator = start_azurite() if kind == "azurite" else start_fake_gcs_server()
    try:
        yield emulator.scheme, dict(emulator.storage_options)
    finally:
        emulator.stop()


def _prepare(scheme: str, options: dict[str, Any], tasks: int, per_task: int
             ) -> dict[str, Any]:
    """Write and task-commit the job through the Python task side; its description."""
    from committer import JobCommitter, TaskAttemptCommitter, task_ids
    from committer.config import CommitterConfig

    config = CommitterConfig(storage_options=options)
    dest = f"{scheme}://c{uuid.uuid4().hex[:12]}/table"
    job_id = uuid.uuid4().hex[:16]
    JobCommitter(dest, job_id, config=config).setup()
    committed: dict[str, str] = {}
    for n in range(tasks):
        task, attempt = task_ids(job_id, n)
        ta = TaskAttemptCommitter(dest, job_id, task, attempt, config=config)
        ta.setup()
        for i in range(per_task):
            with ta.open_output(f"part={i % 4}/part-{n:05d}-{i:04d}.parquet") as out:
                out.write(b"x" * 100)
        ta.commit()
        committed[task] = attempt
    return {"dest": dest, "job_id": job_id, "committed": committed, "options": options,
            "files": tasks * per_task}


def _run_trial(job: dict[str, Any], code: Path | None) -> dict[str, Any]:
    # Run as a script (its own directory first on the path, not the working directory), so
    # that PYTHONPATH decides whose ``committer`` the trial imports. (Imported here: the trial
    # imports this module from that checkout's ``benchmarks``, which may predate run_script.)
    from benchmarks.common import run_script

    return run_script(Path(__file__).resolve(), job, 3600, code=code or ROOT)


def check_destination(job: dict[str, Any]) -> None:
    """Every file of ``job`` at its destination (the trial checked the summary's count)."""
    from committer.config import CommitterConfig
    from committer.store import open_store

    with open_store(job["dest"], CommitterConfig(storage_options=job["options"])) as store:
        found = [s for s in store.walk_files(job["dest"])
                 if not s.path.rsplit("/", 1)[-1].startswith("_")
                 and "/_manifest_committer/" not in s.path]
    if len(found) != job["files"]:
        raise RuntimeError(f"{job['dest']} holds {len(found)} files, expected {job['files']}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    services = [s.strip() for s in args.services.split(",") if s.strip()]
    codes: list[tuple[str, Path | None]] = [("current", None)]
    if args.baseline_dir is not None:
        codes.append(("baseline", args.baseline_dir.resolve()))
    runs: list[dict[str, Any]] = []
    for kind in services:
        for rep in range(args.cpu_repeats):
            order = codes if rep % 2 == 0 else codes[::-1]
            for label, code in order:
                with _service(kind) as (scheme, options):
                    job = _prepare(scheme, options, args.tasks, args.files_per_task)
                    trial = _run_trial(job, code)
                    check_destination(job)
                per_file = trial["cpu_s"] / job["files"] * 1000
                runs.append({"service": kind, "code": label, "repeat": rep + 1,
                             "files": job["files"], "per_file_ms": per_file, **trial})
                print(f"{kind:8} {label:8} rep {rep + 1}: {per_file:.3f} ms CPU/file, "
                      f"wall {trial['wall_s']:.2f} s, requests {trial.get('requests')}",
                      flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for kind in services:
        for label, _ in codes:
            values = [r["per_file_ms"] for r in runs if r["service"] == kind
                      and r["code"] == label]
            summary[f"{kind}/{label}"] = summarize(values)
    return {"services": services, "tasks": args.tasks, "files_per_task": args.files_per_task,
            "baseline_dir": str(args.baseline_dir) if args.baseline_dir else None,
            "runs": runs, "summary": summary}


def report(result: dict[str, Any]) -> str:
    rows = []
    for key, s in result["summary"].items():
        service, code = key.split("/")
        walls = [r["wall_s"] for r in result["runs"] if r["service"] == service
                 and r["code"] == code]
        requests = [r.get("requests") for r in result["runs"] if r["service"] == service
                    and r["code"] == code]
        rows.append([service, code, f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})",
                     f"{summarize(walls)['median']:.2f}",
                     requests[0] if requests and requests[0] is not None else "-"])
    files = result["tasks"] * result["files_per_task"]
    return (f"{result['tasks']} tasks x {result['files_per_task']} files ({files} files); "
            "median (min-max) over the repetitions.\n\n"
            + markdown_table(["service", "code", "engine CPU ms / file", "wall s",
                              "requests (client)"], rows))


# -- the trial: one commit in a fresh interpreter ------------------------------------------------


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def trial(path: str) -> int:
    job = json.loads(Path(path).read_text())
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    # what a long-running driver has imported already (adlfs and gcsfs interpret the
    # storage options into an endpoint and a credential; their imports take ~0.6 s of CPU)
    import adlfs  # noqa: F401
    import gcsfs.core  # noqa: F401

    import committer.store.azure
    import committer.store.gcs
    from committer import JobCommitter
    from committer.config import CommitterConfig
    from committer.store import open_store

    config = CommitterConfig(storage_options=job["options"])
    cpu0, t0 = _cpu(), time.perf_counter()
    store = open_store(job["dest"], config)
    summary = JobCommitter(job["dest"], job["job_id"], config=config, store=store).commit(
        job["committed"])
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    if not summary.success or summary.metrics.get("committer_files_committed") != job["files"]:
        raise SystemExit(f"commit moved {summary.metrics.get('committer_files_committed')}")
    pools = getattr(store.backend, "resources", [])
    requests = sum(getattr(p, "requests", 0) for p in pools) if pools else None
    store.close()
    import committer

    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "requests": requests,
                      "engine": str(Path(committer.__file__).resolve().parent.parent)}))
    return 0


if __name__ == "__main__":
    sys.exit(trial(sys.argv[1]))
