"""The driver side: the engine process, options reaching it, manifests, metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from committer.spark.engine import ENGINE_SCHEMES, forwarded
from manifest_schema import TaskManifest
from tests.spark.helpers import (
    WAIT_S,
    assert_ours,
    data_files,
    drain_listener_events,
    exit_watch,
    intercepting_engine,
    proc_cmdline,
    proc_parent,
    rows,
    schema_validator,
    session_conf,
    wait_for_exit,
)

pytestmark = pytest.mark.spark

SUMMARY_KEY = "spark__hadoop__mapreduce__manifest__committer__summary__report__directory"


def test_engine_commits_and_receives_options(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "subprocess engine"
    reports = spark_work_dir / "reports sub"
    with session_conf(spark, **{SUMMARY_KEY: str(reports)}):
        spark.range(0, 50, numPartitions=3).selectExpr("id", "id % 2 as p").write.partitionBy(
            "p"
        ).parquet(str(dest))
    assert [r[0] for r in rows(spark, "parquet", dest)] == list(range(50))
    doc = assert_ours(dest)
    # The option set on the session reached the subprocess (through its standard input).
    report = json.loads(next(reports.glob("summary-*.json")).read_text(encoding="utf-8"))
    assert report["jobId"] == doc["jobId"]


def test_engine_failure_fails_the_job_with_its_message(
    spark: Any, spark_work_dir: Path
) -> None:
    dest = spark_work_dir / "subprocess failure"
    with session_conf(
        spark, spark__hadoop__mapreduce__manifest__committer__io__threads="0"
    ), pytest.raises(Exception, match="io_threads must be at least 1"):
        spark.range(3).write.parquet(str(dest))
    assert not (dest / "_SUCCESS").exists()


def test_subprocess_gets_credentials_on_stdin_not_argv(spark: Any, spark_work_dir: Path) -> None:
    import sys

    record = spark_work_dir / "python wrapper"
    record.mkdir()
    wrapper = record / "python.sh"
    # Records the command line and the standard input, then runs the real interpreter.
    wrapper.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$0\" \"$@\" > '{record}/argv'\n"
        f"tee '{record}/stdin' | exec '{sys.executable}' \"$@\"\n",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    secret = "s3cr3t-key-value"
    dest = spark_work_dir / "stdin only"
    with session_conf(
        spark,
        spark__manifest__committer__python=str(wrapper),
        spark__hadoop__fs__azure__account__key__example__dfs__core__windows__net=secret,
    ):
        spark.range(5).write.parquet(str(dest))
        [engine_pid] = [p for p in engine_pids(spark) if str(wrapper) not in proc_cmdline(p)
                        and _has_ancestor_cmdline(p, str(wrapper))]
    assert_ours(dest)
    argv = (record / "argv").read_text(encoding="utf-8")
    assert argv.splitlines()[1:] == ["-m", "committer.spark.driver", "--serve"]
    assert secret not in argv
    lines = (record / "stdin").read_text(encoding="utf-8").splitlines()
    requests = [json.loads(line)["request"] for line in lines]
    assert [r["operation"] for r in requests] == ["setupJob", "commitJob"]
    assert secret in requests[1]["conf"].values()
    # Neither the engine's environment nor its command line holds the secret.
    assert secret.encode() not in Path(f"/proc/{engine_pid}/environ").read_bytes()
    assert secret not in proc_cmdline(engine_pid)


def _has_ancestor_cmdline(pid: int, text: str) -> bool:
    for _ in range(3):
        pid = proc_parent(pid)
        if pid <= 1:
            return False
        if text in proc_cmdline(pid):
            return True
    return False


def engine_pids(spark: Any) -> list[int]:
    """Live ``--serve`` engines below this session's JVM (its children, or a wrapper's)."""
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if "committer.spark.driver --serve" not in proc_cmdline(pid):
            continue
        ancestor = pid
        for _ in range(3):
            ancestor = proc_parent(ancestor)
            if ancestor == jvm_pid:
                found.append(pid)
                break
    return sorted(found)


def default_engines(spark: Any) -> list[int]:
    """The engines of the session's own interpreter (not a test's wrapper script)."""
    return [p for p in engine_pids(spark) if "python.sh" not in proc_cmdline(p)
            and not _has_ancestor_cmdline(p, "python.sh")]


def test_subprocess_engine_is_shared_by_jobs_and_replaced_when_it_dies(
    spark: Any, spark_work_dir: Path
) -> None:
    base = spark_work_dir / "persistent engine"
    spark.range(10).write.parquet(str(base / "first"))
    [engine] = default_engines(spark)
    spark.range(10).write.parquet(str(base / "second"))
    assert default_engines(spark) == [engine], "the second job must reuse the engine"
    watch = exit_watch(engine)
    os.kill(engine, signal.SIGKILL)
    assert wait_for_exit(watch)
    spark.range(10).write.parquet(str(base / "third"))
    replacement = default_engines(spark)
    assert len(replacement) == 1 and replacement != [engine], (engine, replacement)
    for name in ("first", "second", "third"):
        assert [r[0] for r in rows(spark, "parquet", base / name)] == list(range(10))
        assert_ours(base / name)


def test_request_carries_only_the_keys_the_engine_reads(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "request keys"
    azure = "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net"
    with intercepting_engine(spark) as engine, session_conf(
        spark,
        **{azure.replace(".", "__"): "azure-key-value",
           "spark__hadoop__fs__s3a__secret__key": "s3a-secret-value",
           "spark__hadoop__mapreduce__manifest__committer__io__threads": "3"},
    ):
        spark.range(4).write.parquet(str(dest))
        hadoop = spark._jsparkSession.sessionState().newHadoopConf()
        expected = {
            str(e.getKey()) for e in hadoop.iterator() if forwarded(str(e.getKey()))
        }
    assert_ours(dest)
    setup, commit = engine.requests
    assert set(commit) == {"operation", "jobId", "jobAttempt", "destinationUri",
                           "dynamicPartitionOverwrite", "conf", "committedTasks",
                           "extraDestinationRoots"}
    assert set(setup) == set(commit) - {"committedTasks", "extraDestinationRoots"}
    assert all(set(t) == {"taskId", "taskAttemptId"} for t in commit["committedTasks"])
    assert set(commit["conf"]) == expected
    bare = {k.removeprefix("spark.hadoop."): v for k, v in commit["conf"].items()}
    assert bare["fs.azure.account.key.acct.dfs.core.windows.net"] == "azure-key-value"
    assert bare["mapreduce.manifest.committer.io.threads"] == "3"
    assert "s3a-secret-value" not in json.dumps(commit)


def test_the_jvm_properties_forwarded_are_the_proxy_the_engine_reads() -> None:
    from committer.spark.engine import JVM_PROPERTIES
    from committer.store import credentials

    # The shim forwards what the engine's ready line names (tests/spark/test_driver.py).
    assert JVM_PROPERTIES == (
        credentials.JVM_PROXY_HOST_KEY, credentials.JVM_PROXY_PORT_KEY,
        credentials.JVM_NON_PROXY_HOSTS_KEY)
    assert forwarded(credentials.GCS_PROXY_ADDRESS_KEY)
    assert forwarded("spark.hadoop." + credentials.GCS_PROXY_PASSWORD_KEY)


def test_shim_sends_the_engine_only_the_schemes_it_commits() -> None:
    from committer.store.credentials import AZURE_SCHEMES, GCS_SCHEMES

    source = (Path(__file__).resolve().parents[2] / "committer" / "spark" / "jvm" / "src"
              / "manifestcommitter" / "spark" / "ManifestCommitProtocol.java").read_text(
                  encoding="utf-8")
    body = source.split("ENGINE_SCHEMES = List.of(", 1)[1].split(");", 1)[0]
    assert tuple(re.findall(r'"([^"]+)"', body)) == ENGINE_SCHEMES
    assert set(ENGINE_SCHEMES) <= AZURE_SCHEMES | GCS_SCHEMES | {"file"}


def test_every_key_the_engine_reads_is_forwarded() -> None:
    from committer.config import KEYS
    from committer.store import credentials

    keys = [k.name for k in KEYS] + [
        credentials.AZURE_BLOB_ENDPOINT_KEY, credentials.AZURE_RATE_LIMIT_KEY,
        credentials.CONCURRENCY_KEY, "fs.azure.account.key.a.dfs.core.windows.net",
        "fs.azure.sas.fixed.token.a", "fs.azure.account.oauth2.client.secret",
        "google.cloud.auth.service.account.json.keyfile", "fs.gs.storage.root.url",
    ]
    assert [k for k in keys if not forwarded(k) or not forwarded("spark.hadoop." + k)] == []


def test_engine_gets_options_and_committed_attempts(
    spark: Any, spark_work_dir: Path
) -> None:
    dest = spark_work_dir / "in process"
    reports = spark_work_dir / "reports in"
    with intercepting_engine(spark) as engine, session_conf(spark, **{SUMMARY_KEY: str(reports)}):
        spark.range(0, 40, numPartitions=4).write.json(str(dest))
    assert engine.operations() == ["setupJob", "commitJob"]
    commit = engine.requests[1]
    assert commit["conf"]["spark.hadoop.mapreduce.manifest.committer.summary.report.directory"] \
        == str(reports)
    tasks = commit["committedTasks"]
    assert len(tasks) == 4
    assert len({t["taskAttemptId"] for t in tasks}) == 4
    assert list(reports.glob("summary-*.json"))
    doc = assert_ours(dest)
    assert doc["metrics"]["committer_files_committed"] == len(data_files(dest))
    assert doc["metrics"]["committer_bytes_committed"] == sum(
        (dest / f).stat().st_size for f in data_files(dest))


def test_shim_manifests_validate_against_schema_and_load(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "schema check"
    validator = schema_validator("task-manifest")
    seen: list[dict[str, Any]] = []
    df = spark.range(0, 30, numPartitions=3).selectExpr("id", "concat('a b:c', id % 2) as p")
    with intercepting_engine(spark) as engine:
        engine.before_commit = "keep_manifests"
        df.write.partitionBy("p").csv(str(dest))
        [commit] = [r for r in engine.requests if r["operation"] == "commitJob"]
        for task in commit["committedTasks"]:
            path = engine.directory / "manifests" / f"{task['taskId']}-manifest.json"
            data = path.read_bytes()
            doc = json.loads(data)
            validator.validate(doc)
            manifest = TaskManifest.loads(data, str(path))
            assert manifest.task_attempt_id == task["taskAttemptId"]
            seen.append(doc)
    assert len(seen) == 3
    for doc in seen:
        assert doc["type"].endswith("TaskManifest/1")
        assert all(not f["s"].endswith(".crc") for f in doc["files"])
        # Hive escaping of the value (":" -> "%3A"), then URI escaping of the path ("%" -> "%25").
        assert all("p=a%20b%253Ac" in f["d"] for f in doc["files"]), doc["files"]
    partitions = sorted(d.name for d in dest.iterdir() if d.is_dir() and d.name.startswith("p="))
    assert partitions == ["p=a b%3Ac0", "p=a b%3Ac1"]


def _last_write_metrics(spark: Any) -> dict[str, str]:
    # the write's metrics reach the SQL status store through the event bus, after the write
    drain_listener_events(spark)
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    last = executions.apply(executions.size() - 1)
    values = store.executionMetrics(last.executionId())
    metrics = last.metrics()
    out = {}
    for i in range(metrics.size()):
        metric = metrics.apply(i)
        value = values.get(metric.accumulatorId())
        if value.isDefined():
            out[str(metric.name())] = str(value.get())
    return out


def test_bytes_written_reported_to_spark(spark: Any, spark_work_dir: Path) -> None:
    # SPARK-33739: the committed output's size must reach Spark's write metrics.
    dest = spark_work_dir / "metrics"
    spark.range(0, 1000, numPartitions=2).write.parquet(str(dest))
    metrics = _last_write_metrics(spark)
    assert metrics.get("number of written files") == "2", metrics
    number, unit = metrics["written output"].split(" ")
    scale = {"B": 1, "KiB": 1024, "MiB": 1024 * 1024}[unit]
    reported = float(number.replace(",", "")) * scale
    total = sum((dest / f).stat().st_size for f in data_files(dest))
    # Spark prints one decimal: agree to within its rounding.
    assert abs(reported - total) <= 0.05 * scale + 1, (metrics["written output"], total)


def test_concurrent_writes(spark: Any, spark_work_dir: Path) -> None:
    base = spark_work_dir / "concurrent"
    shared = base / "shared append"
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            df = spark.range(i * 100, i * 100 + 50, numPartitions=2)
            df.write.parquet(str(base / f"own {i}"))
            df.write.mode("append").parquet(str(shared))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=WAIT_S)
    assert not any(t.is_alive() for t in threads), "a write did not end"
    assert errors == []
    for i in range(3):
        assert [r[0] for r in rows(spark, "parquet", base / f"own {i}")] == list(
            range(i * 100, i * 100 + 50)
        )
        assert_ours(base / f"own {i}")
    expected = sorted(v for i in range(3) for v in range(i * 100, i * 100 + 50))
    assert [r[0] for r in rows(spark, "parquet", shared)] == expected
    assert_ours(shared)


def test_commit_of_many_tasks_reaches_the_engine_whole(spark: Any, spark_work_dir: Path) -> None:
    # 120 tasks make a commit request of ~11 KiB, one line on the engine's standard input.
    dest = spark_work_dir / "many tasks"
    with intercepting_engine(spark) as engine:
        spark.range(0, 240, numPartitions=120).write.parquet(str(dest))
        commit = next(r for r in engine.requests if r["operation"] == "commitJob")
    assert len(commit["committedTasks"]) == 120
    assert len(json.dumps(commit, separators=(",", ":"))) > 8192
    assert [r[0] for r in rows(spark, "parquet", dest)] == list(range(240))
    assert_ours(dest)


def _write_fails_with_engine(spark: Any, work: Path, name: str, script: str,
                             match: str) -> None:
    """A write whose engine is the shell ``script`` fails with ``match``, leaving no
    ``_SUCCESS``."""
    folder = work / name
    folder.mkdir()
    python = folder / "python.sh"
    python.write_text(script, encoding="utf-8")
    python.chmod(0o755)
    dest = work / f"{name} output"
    with session_conf(spark, spark__manifest__committer__python=str(python)), \
            pytest.raises(Exception, match=match):
        spark.range(3).write.parquet(str(dest))
    assert not (dest / "_SUCCESS").exists()


def test_engine_of_another_release_is_refused_by_its_protocol(
    spark: Any, spark_work_dir: Path
) -> None:
    # an engine whose ready line speaks protocol 1 (it names no configuration to forward)
    _write_fails_with_engine(
        spark, spark_work_dir, "engine of another release",
        "#!/bin/sh\necho '{\"ready\": true, \"protocol\": 1, \"pid\": 1}'\ncat > /dev/null\n",
        r"speaks protocol 1, this jar 2: the jar must come from")


def test_engine_that_cannot_start_fails_the_job_with_its_log(
    spark: Any, spark_work_dir: Path
) -> None:
    _write_fails_with_engine(
        spark, spark_work_dir, "no committer here",
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'committer'\" >&2\nexit 1\n",
        r"did not start(.|\n)*No module named 'committer'")
