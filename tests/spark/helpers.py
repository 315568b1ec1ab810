"""Shared helpers of the Spark suite."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from committer.spark import PROTOCOL_CLASS
from committer.testing.engine_python import engine_python

DEFAULT_PROTOCOL = "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
PROTOCOL_KEY = "spark.sql.sources.commitProtocolClass"
OUR_COMMITTER_NAMES = ("spark-manifest-committer",)
#: how long a test waits for what must happen by itself (a process ending, Spark's listeners
#: catching up): reached only when it does not, so the machine's speed never decides a test
WAIT_S = 300.0


def compile_test_filesystem(spark: Any, source: Path, out: Path) -> Any:
    """A class loader of the driver's JVM that knows the test filesystem compiled from
    ``source`` (tests/spark/jvm) into ``out``; needs a JDK."""
    from committer.spark import build

    javac = build.find_javac()
    assert javac is not None
    subprocess.run([javac, "-nowarn", "-cp", f"{build.spark_jars_dir()}/*", "-d", str(out),
                    str(source)], check=True, capture_output=True)
    jvm = spark.sparkContext._jvm
    urls = spark.sparkContext._gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(str(out)).toURI().toURL()
    return jvm.java.net.URLClassLoader(urls, jvm.java.lang.Thread.currentThread()
                                       .getContextClassLoader())


@contextmanager
def session_conf(spark: Any, **entries: str) -> Iterator[None]:
    """Sets runtime SQL options (dots spelled as ``__``) for the block, then restores them."""
    keys = {k.replace("__", "."): v for k, v in entries.items()}
    saved = {k: spark.conf.get(k, None) for k in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@contextmanager
def default_committer(spark: Any) -> Iterator[None]:
    """Writes in the block go through Spark's own commit protocol."""
    spark.conf.set(PROTOCOL_KEY, DEFAULT_PROTOCOL)
    try:
        yield
    finally:
        spark.conf.set(PROTOCOL_KEY, PROTOCOL_CLASS)


def rows(
    spark: Any, fmt: str, path: Path | str, schema: str | None = None
) -> list[tuple[Any, ...]]:
    reader = spark.read.format(fmt)
    if schema is not None:
        reader = reader.schema(schema)
    return sorted(tuple(r) for r in reader.load(str(path)).collect())


def running_tasks(spark: Any) -> int:
    """Task attempts the scheduler has launched whose end it has not been told of yet.

    An attempt's end reaches the scheduler after the attempt has run all of itself, its
    ``abortTask`` included. (The status tracker's count is no substitute: it is kept by a
    listener behind the event bus, and its store writes a task's start only if the last write
    is older than ``spark.ui.liveUpdate.period``; it can say 0 while an attempt runs.)"""
    by_executor = spark.sparkContext._jsc.sc().taskScheduler().runningTasksByExecutors()
    counts = by_executor.values().iterator()
    running = 0
    while counts.hasNext():
        running += int(counts.next())
    return running


def drain_listener_events(spark: Any) -> None:
    """Wait until every listener has handled every event posted so far. What Spark's status
    stores show (SQL executions and their metrics, the status tracker) is kept by listeners
    on an asynchronous event bus, behind what Spark has done."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(int(WAIT_S * 1000))


def wait_until_no_task_runs(spark: Any, timeout: float = WAIT_S) -> None:
    """Wait until every task attempt launched so far has ended. A failed job returns to the
    caller while the rest of its stage may still be being killed; those attempts' aborts come
    after, and may come after the job's abort."""
    deadline = time.monotonic() + timeout
    while running_tasks(spark) > 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"task attempts still running after {timeout} s")
        time.sleep(0.05)


def exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` (any process, not only a child)
    ends: open it before whatever should end the process. None if it is gone already."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def wait_for_exit(watch: int | None, timeout: float = WAIT_S) -> bool:
    """Whether the process of ``watch`` (:func:`exit_watch`) ended within ``timeout``; woken by
    the kernel when it does, not by polling. Closes ``watch``."""
    if watch is None:
        return True
    try:
        ready, _, _ = select.select([watch], [], [], timeout)
        return bool(ready)
    finally:
        os.close(watch)


# A process can end between opening its /proc entry and reading it: the read then fails with
# ESRCH (ProcessLookupError), not ENOENT; both mean "gone".
_GONE = (FileNotFoundError, ProcessLookupError)


def proc_cmdline(pid: int) -> str:
    """The command line of ``pid``, space-joined; empty if the process is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except _GONE:
        return ""


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first, then the
    parent's pid); None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except _GONE:
        return None
    return stat.rsplit(")", 1)[1].split()


def proc_alive(pid: int) -> bool:
    """Running: neither gone nor a zombie awaiting its parent's wait."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def proc_parent(pid: int) -> int:
    """The parent's pid of ``pid``; 0 if the process is gone."""
    fields = proc_stat(pid)
    return 0 if fields is None else int(fields[1])


def data_files(root: Path) -> list[str]:
    """Visible output files (what readers see), relative to ``root``."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file()
        and not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    )


def success(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "_SUCCESS").read_text(encoding="utf-8"))
    return doc


def assert_ours(root: Path) -> dict[str, Any]:
    """``_SUCCESS`` is this committer's JSON and no job directory is left behind."""
    doc = success(root)
    assert doc["name"] == "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
    assert doc["success"] is True
    assert "manifest" in str(doc.get("committer", "")).lower(), doc.get("committer")
    temporary = root / "_temporary"
    leftovers = list(temporary.iterdir()) if temporary.exists() else []
    assert leftovers == [], f"job directories left behind: {leftovers}"
    return doc


class InterceptingEngine:
    """The real engine, in its own process like every engine (``tests.spark.intercepting_engine``),
    which records each request and runs a hook of ``tests.spark.engine_hooks``, named here, before
    or instead of job commit."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._final: list[dict[str, Any]] | None = None

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far (after the block: every request it made)."""
        if self._final is not None:
            return self._final
        log = self.directory / "requests.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]

    def operations(self) -> list[str]:
        return [str(r["operation"]) for r in self.requests]

    def _hooks(self) -> dict[str, str]:
        path = self.directory / "hooks.json"
        if not path.exists():
            return {}
        hooks: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
        return hooks

    def _set_hook(self, when: str, name: str) -> None:
        hooks = self._hooks()
        hooks[when] = name
        (self.directory / "hooks.json").write_text(json.dumps(hooks), encoding="utf-8")

    @property
    def before_commit(self) -> str | None:
        """A function of ``tests.spark.engine_hooks`` run before each job commit."""
        return self._hooks().get("before_commit")

    @before_commit.setter
    def before_commit(self, name: str) -> None:
        self._set_hook("before_commit", name)

    @property
    def replace_commit(self) -> str | None:
        """A function of ``tests.spark.engine_hooks`` whose answer replaces job commit."""
        return self._hooks().get("replace_commit")

    @replace_commit.setter
    def replace_commit(self, name: str) -> None:
        self._set_hook("replace_commit", name)


@contextmanager
def intercepting_engine(spark: Any) -> Iterator[InterceptingEngine]:
    """Writes in the block go to an engine process of their own that records what it is asked."""
    directory = Path(tempfile.mkdtemp(prefix="intercepted-engine-"))
    python = engine_python(directory, "tests.spark.intercepting_engine", str(directory))
    engine = InterceptingEngine(directory)
    try:
        with session_conf(spark, spark__manifest__committer__python=str(python)):
            yield engine
    finally:
        # The engine finishes what it runs and exits; the shim would start a new one if asked.
        (directory / "stop").touch()
        deadline = time.monotonic() + WAIT_S
        while ((directory / "started").exists() and not (directory / "stopped").exists()
               and time.monotonic() < deadline):
            time.sleep(0.02)
        engine._final = engine.requests
        shutil.rmtree(directory, ignore_errors=True)


def schema_validator(name: str) -> Any:
    """A validator for ``manifest_schema``'s schema ``name`` that resolves its ``$ref``s locally
    (the schemas' ``$id``s are not fetchable URLs)."""
    from importlib import resources

    import jsonschema
    from referencing import Registry, Resource

    registry: Any = Registry()
    for entry in resources.files("manifest_schema").joinpath("schemas").iterdir():
        if entry.name.endswith(".schema.json"):
            contents = json.loads(entry.read_text(encoding="utf-8"))
            registry = registry.with_resource(contents["$id"], Resource.from_contents(contents))
    schema = json.loads(
        resources.files("manifest_schema").joinpath(f"schemas/{name}.schema.json").read_text(
            encoding="utf-8"
        )
    )
    return jsonschema.validators.validator_for(schema)(schema, registry=registry)
