"""The subprocess entry point, driven as the JVM drives it: JSON on stdin, JSON on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from committer.spark.driver import PROTOCOL_VERSION
from committer.spark.engine import CONF_KEY_PREFIXES, JVM_PROPERTIES
from tests.spark.helpers import WAIT_S, exit_watch, proc_alive, wait_for_exit

ROOT = Path(__file__).resolve().parents[2]


def _run(stdin: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "committer.spark.driver"],
        input=stdin.encode("utf-8"), capture_output=True, cwd=ROOT, timeout=WAIT_S, check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def _request(operation: str, dest: Path, **extra: object) -> str:
    doc = {
        "operation": operation, "jobId": "job-1", "jobAttempt": 0,
        "destination": str(dest), "destinationUri": dest.as_uri().replace("file:///", "file:/"),
        "dynamicPartitionOverwrite": False, "conf": {}, **extra,
    }
    return json.dumps(doc)


def test_unreadable_request_exits_non_zero_with_message() -> None:
    code, response = _run("not json")
    assert code == 1
    assert response["ok"] is False
    assert "unreadable request" in str(response["error"])


def test_setup_commit_of_an_empty_job(tmp_path: Path) -> None:
    dest = tmp_path / "out ü"
    code, response = _run(_request("setupJob", dest))
    assert (code, response) == (0, {"ok": True, "result": {}})
    assert (dest / "_temporary" / "manifest_job-1" / "00" / "manifests").is_dir()
    code, response = _run(_request("commitJob", dest, committedTasks=[]))
    assert code == 0, response
    assert json.loads((dest / "_SUCCESS").read_text(encoding="utf-8"))["jobId"] == "job-1"


def test_commit_of_a_task_without_manifest_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    assert _run(_request("setupJob", dest))[0] == 0
    tasks = [{"taskId": "task_1_0001_m_000000", "taskAttemptId": "attempt_1_0001_m_000000_0"}]
    code, response = _run(_request("commitJob", dest, committedTasks=tasks))
    assert code == 1
    assert response["errorType"] == "UntrustedManifestError"
    assert "task_1_0001_m_000000" in str(response["error"])
    assert not (dest / "_SUCCESS").exists()
    code, response = _run(_request("abortJob", dest))
    assert code == 0
    assert not (dest / "_temporary" / "manifest_job-1").exists()


@pytest.mark.parametrize("operation", ["renameJob", ""])
def test_unknown_operation(tmp_path: Path, operation: str) -> None:
    code, response = _run(_request(operation, tmp_path / "x"))
    assert code == 1
    assert "unknown operation" in str(response["error"])


# -- the persistent engine: python -m committer.spark.driver --serve ---------------------------


class _Engine:
    """A ``--serve`` engine driven as the JVM drives it: request lines in, response lines out."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "committer.spark.driver", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        ready = json.loads(self.stdout.readline())
        assert ready == {"ready": True, "protocol": PROTOCOL_VERSION, "pid": self.proc.pid,
                         "confPrefixes": list(CONF_KEY_PREFIXES),
                         "jvmProperties": list(JVM_PROPERTIES)}

    def send(self, request_id: int, request: str) -> None:
        self.stdin.write(f'{{"id":{request_id},"request":{request}}}\n'.encode())
        self.stdin.flush()

    def receive(self) -> tuple[int, dict[str, Any]]:
        doc = json.loads(self.stdout.readline())
        return doc["id"], doc["response"]

    def call(self, request_id: int, request: str) -> dict[str, Any]:
        self.send(request_id, request)
        got, response = self.receive()
        assert got == request_id
        return response

    def close(self) -> int:
        self.stdin.close()
        code = self.proc.wait(timeout=WAIT_S)
        self.stdout.close()
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code


def test_serve_runs_jobs_one_after_another_in_one_process(tmp_path: Path) -> None:
    engine = _Engine()
    try:
        for n in range(3):
            dest = tmp_path / f"out {n}"
            assert engine.call(2 * n, _request("setupJob", dest)) == {"ok": True, "result": {}}
            response = engine.call(2 * n + 1, _request("commitJob", dest, committedTasks=[]))
            assert response["ok"] is True, response
            assert json.loads((dest / "_SUCCESS").read_text(encoding="utf-8"))["jobId"] == "job-1"
        failed = engine.call(9, _request("renameJob", tmp_path / "x"))
        assert failed["ok"] is False and "unknown operation" in failed["error"]
    finally:
        assert engine.close() == 0


def test_serve_answers_concurrent_requests_in_the_order_they_finish(tmp_path: Path) -> None:
    # A request that waits on a lock another job holds must not hold up a quick one behind it.
    from committer.job.durability.lock import DestinationLock
    from committer.store import open_store

    slow_dest, quick_dest = tmp_path / "slow", tmp_path / "quick"
    # The slow commit waits as long as the test holds the lock (an hour at most: what ends
    # its wait is the release below, never the machine's speed).
    conf = {"mapreduce.manifest.committer.lock.mode": "always",
            "mapreduce.manifest.committer.lock.wait.ms": "3600000"}
    engine = _Engine()
    try:
        assert engine.call(1, _request("setupJob", slow_dest))["ok"]
        assert engine.call(2, _request("setupJob", quick_dest))["ok"]
        store = open_store(str(slow_dest))
        lock = DestinationLock(store, str(slow_dest), "other-job", wait_ms=0,
                               lease_ms=3_600_000, purpose="test")
        lock.acquire()
        try:
            engine.send(3, _request("commitJob", slow_dest, committedTasks=[], conf=conf))
            engine.send(4, _request("commitJob", quick_dest, committedTasks=[]))
            first_id, first = engine.receive()
            assert (first_id, first["ok"]) == (4, True), first
        finally:
            lock.release()
        second_id, second = engine.receive()
        assert (second_id, second["ok"]) == (3, True), second
        assert (slow_dest / "_SUCCESS").exists() and (quick_dest / "_SUCCESS").exists()
    finally:
        assert engine.close() == 0


def test_serve_finishes_running_requests_at_end_of_input(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    engine = _Engine()
    assert engine.call(1, _request("setupJob", dest))["ok"]
    engine.send(2, _request("commitJob", dest, committedTasks=[]))
    engine.stdin.close()  # as when the JVM dies right after sending
    request_id, response = engine.receive()
    assert (request_id, response["ok"]) == (2, True), response
    assert engine.proc.wait(timeout=WAIT_S) == 0
    assert (dest / "_SUCCESS").exists()


def test_serve_stdout_carries_only_responses(tmp_path: Path) -> None:
    # A stray print in the engine (a library's) must land in the log, not in the channel.
    script = (
        "import sys\n"
        "from committer.spark import driver\n"
        "def noisy(request):\n"
        "    print('stray output')\n"
        "    return {'ok': True, 'result': {}}\n"
        "sys.exit(driver.Server(sys.stdin.buffer, driver._private_stdout(), noisy).serve())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], input=b'{"id":5,"request":{}}\n',
                          capture_output=True, cwd=ROOT, timeout=WAIT_S, check=False)
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line).get("id") for line in lines] == [None, 5]
    assert b"stray output" in proc.stderr


def test_serve_exits_when_its_parent_dies_even_if_input_stays_open(tmp_path: Path) -> None:
    # The backstop for end of input: another process holds the engine's input open, its parent
    # is killed; the engine notices it was re-parented and exits.
    pid_file = tmp_path / "engine.pid"
    launcher = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'committer.spark.driver', '--serve'],\n"
        "                     stdout=subprocess.PIPE)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "p.stdout.readline()\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    read_end, write_end = os.pipe()  # this test keeps the engine's input open
    launcher_proc = subprocess.Popen([sys.executable, "-c", launcher], stdin=read_end,
                                     stdout=subprocess.PIPE, cwd=ROOT)
    os.close(read_end)
    try:
        assert launcher_proc.stdout is not None
        assert launcher_proc.stdout.readline() == b"ready\n"
        engine_pid = int(pid_file.read_text())
        assert proc_alive(engine_pid)
        watch = exit_watch(engine_pid)
        launcher_proc.kill()
        launcher_proc.wait(timeout=WAIT_S)
        assert wait_for_exit(watch), "the engine outlived its parent"
        assert not proc_alive(engine_pid)
    finally:
        os.close(write_end)
        launcher_proc.kill()
        if launcher_proc.stdout is not None:
            launcher_proc.stdout.close()
