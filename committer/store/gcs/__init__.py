"""Google Cloud Storage (``gs://``), by concern:

- ``store.py``: :class:`GcsStore` (reading, writing, deleting) and ``open_gcs``, registered
  for the schemes;
- ``api.py``: one JSON API request (pool, token, limit, faults) and the single-object calls;
- ``renames.py``: the move API, else rewrite + delete, and the recovery of a half-done rename;
- ``batch.py``: a chunk's rewrites and deletes through the batch endpoint;
- ``wire.py``: what an answer means (error families, checksums, times, ``Retry-After``);
- ``auth.py``: the bearer token, kept until shortly before it expires.
"""

from committer.store.gcs.batch import BATCH_LIMIT
from committer.store.gcs.store import GcsStore, open_gcs
from committer.store.gcs.wire import GcsHttpError, classify_gcs

__all__ = ["BATCH_LIMIT", "GcsHttpError", "GcsStore", "classify_gcs", "open_gcs"]
