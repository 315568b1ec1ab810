"""What an ``OSError`` of a local-disk call means to the engine: its error family."""

from __future__ import annotations

import errno

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError

# Worth retrying: the call was interrupted or the resource was busy for a moment.
_TRANSIENT_ERRNOS = frozenset({errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT, errno.EBUSY})


def translate(e: OSError, path: str) -> StoreError:
    """Map an ``OSError`` to the engine's families, naming the path."""
    msg = f"{e.strerror or e}: {path}"
    if e.errno == errno.ENOENT:
        return PathNotFoundError(msg, path)
    if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
        return PathExistsError(msg, path)
    if e.errno in _TRANSIENT_ERRNOS:
        return TransientStoreError(msg, path)
    return StoreError(msg, path)
