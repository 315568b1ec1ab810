"""The in-process job engine: the JVM shim calls Python through the PySpark driver's Py4J gateway.

:func:`register` puts a :class:`PythonJobCommitEngine` into the JVM's ``EngineRegistry``. Spark
calls ``commitJob`` on a JVM thread that no Python thread is waiting on, so Py4J's callback
server must be running; it is started here.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from committer.spark.engine import RequestError, error_response, handle

__all__ = ["ENGINE_INTERFACE", "PythonJobCommitEngine", "register", "unregister"]

ENGINE_INTERFACE = "manifestcommitter.spark.JobCommitEngine"

_lock = threading.Lock()
# Py4J holds only a weak handle on Python callback objects: keep the registered one alive here.
_registered: dict[int, PythonJobCommitEngine] = {}
# Pieces of requests too large for one Py4J call, by request id (EngineClient.pieces).
_parts: dict[str, list[str]] = {}
_parts_lock = threading.Lock()


def _whole(request_json: str) -> str:
    """The request itself, joined from its pieces when the JVM sent it in pieces."""
    if '"requestParts"' not in request_json[:200]:
        return request_json
    try:
        ref = json.loads(request_json)
        request_id = ref["requestParts"]
    except (ValueError, KeyError, TypeError):
        return request_json  # not a reference after all: the request is parsed as it is
    with _parts_lock:
        parts = _parts.pop(request_id, None)
    if parts is None:
        raise RequestError(f"no pieces were received for request {request_id}")
    return "".join(parts)


class PythonJobCommitEngine:
    """Implements the Java ``JobCommitEngine`` interface; each call is independent."""

    def _call(self, operation: str, request_json: str) -> str:
        try:
            request = json.loads(request_json)
            if not isinstance(request, dict):
                raise ValueError("request is not a JSON object")
            if request.get("operation") != operation:
                raise ValueError(f"{operation} called with a {request.get('operation')!r} request")
            response = handle(request)
        except Exception as exc:  # a Py4J callback must answer, never raise into the JVM
            response = error_response(exc)
        return json.dumps(response, separators=(",", ":"))

    def _entry(self, operation: str, request_json: str) -> str:
        try:
            whole = _whole(request_json)
        except Exception as exc:  # a Py4J callback must answer, never raise into the JVM
            return json.dumps(error_response(exc), separators=(",", ":"))
        return self._call(operation, whole)

    # camelCase: Py4J dispatches by the Java interface's method and parameter names.
    def setupJob(self, requestJson: str) -> str:
        return self._entry("setupJob", requestJson)

    def commitJob(self, requestJson: str) -> str:
        return self._entry("commitJob", requestJson)

    def abortJob(self, requestJson: str) -> str:
        return self._entry("abortJob", requestJson)

    def deleteWithJob(self, requestJson: str) -> str:
        return self._entry("deleteWithJob", requestJson)

    def requestPart(self, requestId: str, part: str) -> str:
        with _parts_lock:
            _parts.setdefault(requestId, []).append(part)
        return ""

    class Java:
        implements = [ENGINE_INTERFACE]


def _registry(spark: Any) -> Any:
    jvm = spark.sparkContext._jvm
    registry = jvm.manifestcommitter.spark.EngineRegistry
    # An unloaded class shows up as a Py4J JavaPackage rather than a JavaClass.
    if type(registry).__name__ != "JavaClass":
        raise RuntimeError(
            "the spark-manifest-committer jar is not on the driver's classpath; create the "
            "session with committer.spark.configure(builder) or add committer.spark.jar_path() "
            "to spark.jars and spark.driver.extraClassPath"
        )
    return registry


def register(spark: Any, engine: PythonJobCommitEngine | None = None) -> PythonJobCommitEngine:
    """Registers ``engine`` (default: a new one) as the job engine of ``spark``'s JVM."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    gateway = sc._gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    registry = _registry(spark)
    engine = engine if engine is not None else PythonJobCommitEngine()
    with _lock:
        registry.register(engine)
        _registered.clear()
        _registered[id(gateway)] = engine
    return engine


def unregister(spark: Any) -> bool:
    """Removes the engine registered by :func:`register`; later jobs use the subprocess engine."""
    gateway = spark.sparkContext._gateway
    with _lock:
        if _registered.pop(id(gateway), None) is None:
            return False
        _registry(spark).clear()
        return True
