"""A Spark Connect server for tests: pyspark's own ``SparkConnectServer`` started with the
committer's ``--conf`` lines, on 127.0.0.1 and a free port, stopped after.

The server is what a cluster runs: a JVM application with no Python driver, so its jobs commit
through the subprocess engine, exactly as the ``--conf`` lines of docs/spark.md set it up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import committer.spark
from committer.testing.emulators import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_MARKER = "Spark Connect server started"
READY_TIMEOUT_S = 600.0  # generous: a loaded machine; a server that is ready never waits for it


@dataclass
class ConnectServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def log_tail(self, limit: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-limit:]

    def stop(self) -> None:
        """SIGTERM to the server's own process group (spark-submit and its JVM), then SIGKILL."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def connect_server_available() -> bool:
    """pyspark 4 ships the server; Spark 3.5's is a separate artifact pyspark does not carry."""
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return any(jars.glob("spark-connect_*.jar"))


def conf_lines(warehouse: Path) -> list[str]:
    """``--jars``, ``--driver-class-path`` and ``--conf`` arguments, as docs/spark.md gives them."""
    jar = str(committer.spark.jar_path())
    conf = committer.spark.spark_conf()
    conf.update({
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.driver.memory": "1g",
    })
    args = ["--jars", jar, "--driver-class-path", jar]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args


def start_connect_server(work: Path) -> ConnectServer:
    import pyspark

    port = free_port()
    home = Path(pyspark.__file__).resolve().parent
    log_path = work / "connect-server.log"
    argv = [
        str(home / "bin" / "spark-submit"), "--master", "local[2]", "--class", SERVER_CLASS,
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        *conf_lines(work / "warehouse"),
    ]
    env = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    server = ConnectServer(proc, port, log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while READY_MARKER not in log_path.read_text(errors="replace"):
        if proc.poll() is not None:
            raise RuntimeError(f"Connect server exited {proc.returncode}:\n{server.log_tail()}")
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"Connect server not ready in {READY_TIMEOUT_S:.0f} s:\n"
                               f"{server.log_tail()}")
        time.sleep(0.2)
    return server
