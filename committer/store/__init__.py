"""The store layer: every storage access of the engine goes through here.

``open_store(location, config)`` picks a backend by URL scheme (local disk for plain paths and
``file:``, fsspec for anything else; cloud backends register themselves for their schemes) and
wraps it in a :class:`ManagedStore` (statistics, retries, rate limit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from committer.config import CommitterConfig
from committer.errors import ConfigError
from committer.statistics import IOStatistics
from committer.store.base import FileStatus, Store
from committer.store.local.store import LocalStore
from committer.store.managed.store import ManagedStore
from manifest_schema.uris import split_scheme

__all__ = ["FileStatus", "ManagedStore", "Store", "open_backend", "open_store", "register_backend"]

BackendFactory = Callable[[str, Mapping[str, Any]], Store]
_BACKENDS: dict[str, BackendFactory] = {}


def register_backend(scheme: str, factory: BackendFactory) -> None:
    """Make ``scheme://`` locations use ``factory(location, storage_options)``."""
    _BACKENDS[scheme] = factory


def _fsspec_backend(location: str, options: Mapping[str, Any]) -> Store:
    import fsspec

    from committer.store.fsspec_store import FsspecStore

    scheme, _ = split_scheme(location)
    try:
        fs = fsspec.filesystem(scheme, **dict(options))
    except (ImportError, ValueError) as e:
        raise ConfigError(f"no filesystem for scheme {scheme!r}: {e}") from None
    return FsspecStore(fs, scheme)


def open_backend(location: str, storage_options: Mapping[str, Any] | None = None) -> Store:
    scheme, _ = split_scheme(location)
    if scheme in ("", "file"):
        return LocalStore()
    factory = _BACKENDS.get(scheme)
    if factory is None:
        _load_builtin_backends()
        factory = _BACKENDS.get(scheme, _fsspec_backend)
    return factory(location, storage_options or {})


def _load_builtin_backends() -> None:
    # Cloud backends import heavy SDKs; load them only when a cloud URL is first seen.
    import importlib

    for module in ("committer.store.azure", "committer.store.gcs"):
        try:
            importlib.import_module(module)
        except ImportError:
            continue


def open_store(
    location: str,
    config: CommitterConfig | None = None,
    stats: IOStatistics | None = None,
    backend: Store | None = None,
) -> ManagedStore:
    """The managed store for ``location``; pass ``backend`` to supply one (tests, faults)."""
    config = config or CommitterConfig()
    if backend is None and split_scheme(location)[0] in ("", "file"):
        # renames and directory creation stay beneath the location (see store/local/beneath.py)
        backend = LocalStore(location, follow_symlinks=config.destination_follow_symlinks)
    elif backend is None:
        backend = open_backend(location, config.storage_options)
    return ManagedStore(backend, config, stats)
