"""Local disk (plain paths and ``file:``): the store, its directory safety beneath the
destination, the identity of a file, and the C loops of its batches.

- ``store.py``: :class:`LocalStore` and its renames (``renameat2(RENAME_NOREPLACE)``), and
  what works on many files at once (a chunk's renames, ``rmdir`` runs, sources' identities,
  a directory's check), in C where built;
- ``files.py``: everything else (status, listings, reads, writes, deletes) and the cache of
  directories opened beneath the destination;
- ``beneath.py``: directories opened beneath the destination without following links;
- ``relative.py``: paths relative to the deepest directory they share;
- ``identity.py``: the etag of a local file; ``os_errors.py``: ``OSError`` -> error family;
- ``_native.c``: the batch loops in C, the GIL released (optional; see setup.py).
"""

from committer.store.local.files import filesystem_type
from committer.store.local.identity import file_etag
from committer.store.local.store import LocalStore

__all__ = ["LocalStore", "file_etag", "filesystem_type"]
