"""Task side of the protocol: a task attempt's working directory -> its committed manifest.

    scan.py      walk the task attempt directory into file and directory entries
    manifest.py  save the manifest under the attempt's temporary name, rename it into place
    attempt.py   the public API: setup, output paths, commit, abort
"""

from committer.task.attempt import TaskAttemptCommitter

__all__ = ["TaskAttemptCommitter"]
