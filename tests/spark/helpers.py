"""Shared helpers of the Spark suite."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from committer.spark import ENGINE_KEY, PROTOCOL_CLASS
from committer.spark.bridge import PythonJobCommitEngine

DEFAULT_PROTOCOL = "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
PROTOCOL_KEY = "spark.sql.sources.commitProtocolClass"
OUR_COMMITTER_NAMES = ("spark-manifest-committer",)


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


@contextmanager
def engine_mode(spark: Any, mode: str) -> Iterator[None]:
    with session_conf(spark, **{ENGINE_KEY.replace(".", "__"): mode}):
        yield


def rows(
    spark: Any, fmt: str, path: Path | str, schema: str | None = None
) -> list[tuple[Any, ...]]:
    reader = spark.read.format(fmt)
    if schema is not None:
        reader = reader.schema(schema)
    return sorted(tuple(r) for r in reader.load(str(path)).collect())


def wait_until_no_task_runs(spark: Any, timeout: float = 60.0) -> None:
    """Wait until the executors run no task. A failed job returns to the caller while the rest
    of its stage may still be being killed; those tasks' aborts come after."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout
    while sum(e.numRunningTasks() for e in tracker.getExecutorInfos()) > 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"tasks still running after {timeout} s")
        time.sleep(0.05)


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


class InterceptingEngine(PythonJobCommitEngine):
    """The real in-process engine with hooks before each operation (to inspect or sabotage)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.before_commit: Callable[[dict[str, Any]], None] | None = None
        self.replace_commit: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def _call(self, operation: str, request_json: str) -> str:
        request = json.loads(request_json)
        with self._lock:
            self.requests.append(request)
        if operation == "commitJob":
            if self.before_commit is not None:
                self.before_commit(request)
            if self.replace_commit is not None:
                return json.dumps(self.replace_commit(request))
        return super()._call(operation, request_json)

    def operations(self) -> list[str]:
        with self._lock:
            return [str(r["operation"]) for r in self.requests]


@contextmanager
def intercepting_engine(spark: Any) -> Iterator[InterceptingEngine]:
    """Registers an :class:`InterceptingEngine` for the block, then the normal engine again."""
    from committer.spark.bridge import register

    engine = InterceptingEngine()
    register(spark, engine)
    try:
        yield engine
    finally:
        register(spark)


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
