"""The managed store: a backend with statistics, retries, a rate limit and the recovery of
ambiguous renames; the only store the stages see.

- ``store.py``: :class:`ManagedStore`, the backend's flags and its operations;
- ``renames.py``: renames one at a time, in batches or over worker processes, recovered;
- ``calls.py``: how each call is paced (rate limit), timed (IOStatistics) and retried.
"""

from committer.store.managed.store import ManagedStore

__all__ = ["ManagedStore"]
