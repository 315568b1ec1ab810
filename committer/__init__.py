"""spark-manifest-committer: a manifest-based job commit engine for Spark and Python writers.

The data's path through the package:

    task/      task attempt directory -> scan -> manifest (saved, renamed into place)
    job/       stages/: manifests -> plan -> directories -> renames -> [validation] -> _SUCCESS
               -> cleanup; durability/: journal, move-aside, lock, history, rollback
    store/     every storage access: backends, statistics, retries, rate limit, fault injection
    spark/     the JVM shim's Python side (PySpark helper, the engine process)
    cli/       the ``manifest-committer`` command
"""

from committer.config import CommitterConfig
from committer.errors import ManifestCommitterError
from committer.job import JobCommitter
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids

__all__ = [
    "CommitterConfig",
    "JobCommitter",
    "ManifestCommitterError",
    "TaskAttemptCommitter",
    "task_ids",
]
__version__ = "0.1.0"
