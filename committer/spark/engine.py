"""The job side of the Spark commit protocol: one request document in, one response out.

The shim's one transport, the engine process :mod:`committer.spark.driver`, calls :func:`handle`.
The request is built by the JVM shim (``EngineClient``/``ManifestCommitProtocol``) and carries
only what the engine reads::

    {"operation": "setupJob" | "commitJob" | "abortJob" | "deleteWithJob",
     "jobId": str, "jobAttempt": int,
     "destinationUri": str,    # Hadoop Path.toUri().toString() of the destination
     "dynamicPartitionOverwrite": bool,
     "conf": {str: str},       # only the keys matching CONF_KEY_PREFIXES
     # commitJob only:
     "committedTasks": [{"taskId": str, "taskAttemptId": str}, ...],
     "extraDestinationRoots": [uri, ...],   # custom partition locations, Hadoop URI strings
     # deleteWithJob only (static overwrite: the path Spark would delete, on dest's filesystem):
     "path": uri}

``deleteWithJob`` moves ``path`` into the job's directory instead of deleting it
(:meth:`committer.job.JobCommitter.move_aside`); its result is ``{"moved": bool}``.

and the response is ``{"ok": true, "result": {...}}`` or
``{"ok": false, "error": str, "errorType": str}``.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any

from committer.errors import ConfigError, ManifestCommitterError
from manifest_schema.uris import uri_to_location

__all__ = ["CONF_KEY_PREFIXES", "ENGINE_SCHEMES", "JVM_PROPERTIES", "OPERATIONS", "RequestError",
           "error_response", "forwarded", "handle"]

LOG = logging.getLogger(__name__)
OPERATIONS = ("setupJob", "commitJob", "abortJob", "deleteWithJob")

# The configuration keys the engine reads (Hadoop names; Spark may prefix them "spark.hadoop."):
# the committer's options (committer.config) and the store keys that become credentials and
# endpoints (committer.store.credentials). The engine's ready line names them and the shim
# forwards exactly these (committer.spark.driver).
CONF_KEY_PREFIXES = (
    "mapreduce.manifest.committer.",
    "mapreduce.fileoutputcommitter.cleanup.skipped",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs",
    "fs.azure.account.key",
    "fs.azure.sas.fixed.token",
    "fs.azure.account.oauth2.client.",
    "fs.azure.blob.endpoint",
    "fs.azure.abfs.endpoint",
    "fs.azure.always.use.https",
    "fs.azure.io.rate.limit",
    "google.cloud.auth.service.account.json.keyfile",
    "fs.gs.auth.service.account.json.keyfile",
    "fs.gs.storage.root.url",
    "fs.gs.project.id",
    # every auth key of the two connectors, so that what cannot run here is refused at setup
    "fs.azure.account.auth.type",
    "fs.azure.account.oauth.provider.type",
    "fs.azure.account.oauth2.",
    "fs.azure.sas.token.provider.type",
    "fs.azure.enable.delegation.token",
    "fs.gs.auth.",
    "google.cloud.auth.",
    "fs.gs.token.server.url",
    # the GCS connector's proxy (address, username, password)
    "fs.gs.proxy.",
)

# JVM system properties the shim adds to the forwarded configuration when they are set: the
# proxy that ABFS follows (named in the ready line too).
JVM_PROPERTIES = ("https.proxyHost", "https.proxyPort", "http.nonProxyHosts")

# The destinations the shim sends here: schemes whose store this engine builds from the Spark
# configuration (committer.store.credentials; local disk). Any other is committed in the JVM by
# Spark's protocol with Hadoop's committer (ManifestCommitProtocol's ENGINE_SCHEMES, kept equal
# by a test).
ENGINE_SCHEMES = ("file", "abfs", "abfss", "wasb", "wasbs", "gs")


def forwarded(key: str) -> bool:
    """Whether the shim sends configuration key ``key`` to the engine."""
    return key.removeprefix("spark.hadoop.").startswith(CONF_KEY_PREFIXES)


class RequestError(ConfigError):
    """The request document from the JVM is malformed."""


def _str(request: Mapping[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise RequestError(f"request field {key!r} must be a non-empty string, got {value!r}")
    return value


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"request field {what!r} must be a list of strings")
    return list(value)


def _conf(request: Mapping[str, Any]) -> dict[str, str]:
    conf = request.get("conf") or {}
    if not isinstance(conf, dict):
        raise RequestError("request field 'conf' must be an object")
    return {str(k): str(v) for k, v in conf.items()}


def committed_tasks(request: Mapping[str, Any]) -> dict[str, str]:
    """``{taskId: taskAttemptId}`` of the attempts Spark committed; a task twice is an error."""
    tasks = request.get("committedTasks")
    if not isinstance(tasks, list):
        raise RequestError("commitJob request needs a 'committedTasks' list")
    out: dict[str, str] = {}
    for entry in tasks:
        if not isinstance(entry, dict):
            raise RequestError("each committed task must be an object")
        task_id = _str(entry, "taskId")
        attempt_id = _str(entry, "taskAttemptId")
        previous = out.setdefault(task_id, attempt_id)
        if previous != attempt_id:
            # Spark's coordinator lets one attempt per task commit; two means a broken driver.
            raise RequestError(
                f"task {task_id} reported as committed by two attempts: {previous}, {attempt_id}"
            )
    return out


def _location(uri: str) -> str:
    """The engine's location for a Hadoop URI string from the JVM (decoded exactly once)."""
    try:
        return uri_to_location(uri)
    except ValueError as exc:
        raise RequestError(str(exc)) from None


def _job(request: Mapping[str, Any]) -> Any:
    from committer.config import CommitterConfig
    from committer.job import JobCommitter
    from committer.store.credentials import config_for_location

    attempt = request.get("jobAttempt", 0)
    if not isinstance(attempt, int) or isinstance(attempt, bool):
        raise RequestError(f"request field 'jobAttempt' must be an integer, got {attempt!r}")
    dest = _location(_str(request, "destinationUri"))
    conf = _conf(request)
    # Hadoop's store keys (fs.azure.account.key.*, google.cloud.auth.*, ...) that the Spark
    # user already set become the engine's storage options for this destination.
    config = config_for_location(CommitterConfig.from_hadoop_conf(conf), conf, dest)
    return JobCommitter(
        dest=dest,
        job_id=_str(request, "jobId"),
        job_attempt=attempt,
        config=config,
        dynamic_partition_overwrite=bool(request.get("dynamicPartitionOverwrite", False)),
        progress=None,
    )


def _run(request: Mapping[str, Any]) -> dict[str, Any]:
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise RequestError(f"unknown operation {operation!r}; expected one of {OPERATIONS}")
    job = _job(request)
    if operation == "setupJob":
        job.setup()
        return {}
    if operation == "abortJob":
        job.abort()
        return {}
    if operation == "deleteWithJob":
        return {"moved": bool(job.move_aside(_location(_str(request, "path"))))}
    tasks = committed_tasks(request)
    roots = [
        _location(uri)
        for uri in _str_list(request.get("extraDestinationRoots"), "extraDestinationRoots")
    ]
    summary = job.commit(committed_tasks=tasks, extra_destination_roots=roots)
    doc = summary.to_json()
    metrics = doc.get("metrics") or {}
    return {
        "summary": doc,
        "filesCommitted": metrics.get("committer_files_committed"),
        "bytesCommitted": metrics.get("committer_bytes_committed"),
    }


def error_response(exc: BaseException) -> dict[str, Any]:
    """The response for a failure: the engine's own message, and its type for diagnostics."""
    response: dict[str, Any] = {
        "ok": False,
        "error": str(exc) or type(exc).__name__,
        "errorType": type(exc).__name__,
    }
    if not isinstance(exc, ManifestCommitterError):
        # An unexpected exception is a bug: keep the traceback for the report.
        response["traceback"] = "".join(traceback.format_exception(exc))
    return response


def handle(request: Mapping[str, Any]) -> dict[str, Any]:
    """Runs one request; never raises (every failure becomes an error response)."""
    operation = request.get("operation", "?")
    try:
        result = _run(request)
    except Exception as exc:
        LOG.error("manifest committer %s of job %s failed: %s", operation,
                  request.get("jobId"), exc)
        return error_response(exc)
    return {"ok": True, "result": result}
