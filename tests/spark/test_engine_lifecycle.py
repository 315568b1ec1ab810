"""The persistent subprocess engine ends with its driver JVM: killed (SIGKILL) or exiting."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.helpers import exit_watch, proc_alive, proc_cmdline, proc_parent, wait_for_exit

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

# A driver of its own: one write through the subprocess engine, then it prints the JVM's pid
# and waits for a line on its standard input before it stops the session.
DRIVER = """
import sys
from pyspark.sql import SparkSession
import committer.spark

builder = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
           .config("spark.driver.memory", "512m"))
spark = committer.spark.configure(builder).getOrCreate()
spark.range(3).write.parquet(sys.argv[1])
print("jvm", spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
sys.stdin.readline()
spark.stop()
"""


def _children_engines(parent: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if "committer.spark.driver --serve" in proc_cmdline(pid) and proc_parent(pid) == parent:
            out.append(pid)
    return out


@pytest.mark.parametrize("ending", ["jvm killed", "session stopped"])
def test_engine_exits_with_its_driver(tmp_path: Path, ending: str) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "out")], cwd=REPO,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.startswith("jvm "), proc.stderr.read() if proc.stderr else line
        jvm = int(line.split()[1])
        [engine] = _children_engines(jvm)
        assert (tmp_path / "out" / "_SUCCESS").exists()
        watch = exit_watch(engine)
        if ending == "jvm killed":
            os.kill(jvm, signal.SIGKILL)
        else:
            proc.stdin.write("\n")
            proc.stdin.flush()
        # it ends by itself (end of input, or its parent gone): a generous wait, woken by the
        # kernel when it ends
        assert wait_for_exit(watch), f"engine {engine} outlived its JVM ({ending})"
        assert not proc_alive(engine)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
