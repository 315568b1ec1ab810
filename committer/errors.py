"""Exception families of the engine, all under :class:`ManifestCommitterError`.

    ManifestCommitterError
    ├── FormatError              a document is unreadable or breaks its schema (manifest_schema)
    ├── ConfigError              a configuration value is missing or malformed
    ├── StoreError               a storage operation failed
    │   ├── PathNotFoundError    the path does not exist
    │   ├── PathExistsError      the path exists where it must not
    │   ├── TransientStoreError  worth retrying: throttling, timeouts, connection resets
    │   ├── AmbiguousRenameError a retried rename could not be proven to have happened
    │   └── UnsafePathError      a local path goes through a symbolic link beneath its root
    ├── UntrustedManifestError   manifests that job commit refuses before any file moves
    ├── JobConflictError         another job, or a finished job, owns what this job needs
    └── CommitFailedError        a job commit stage failed (wraps the cause, names the stage)
"""

from __future__ import annotations

from collections.abc import Sequence

from manifest_schema.errors import FormatError, ManifestCommitterError

__all__ = [
    "AmbiguousRenameError",
    "CommitFailedError",
    "ConfigError",
    "FormatError",
    "JobConflictError",
    "ManifestCommitterError",
    "PathExistsError",
    "PathNotFoundError",
    "StoreError",
    "TransientStoreError",
    "UnsafePathError",
    "UntrustedManifestError",
]


class ConfigError(ManifestCommitterError):
    """A configuration key has a value that cannot be used."""


class StoreError(ManifestCommitterError):
    """A storage operation failed; ``path`` names what it was operating on."""

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(message)


class PathNotFoundError(StoreError, FileNotFoundError):
    """The path does not exist."""


class PathExistsError(StoreError, FileExistsError):
    """The path exists where the operation needs it not to."""


class TransientStoreError(StoreError):
    """A failure that a retry may cure: throttling (429/503), timeouts, resets.

    ``throttled``: the service refused the request without carrying it out (Azure
    ``503 ServerBusy``, GCS ``429``), so it can be sent again as it is; otherwise the outcome
    is unknown (a timeout, a lost answer) and a retry must first look at what is there.
    ``retry_after``: the seconds the service asked the client to wait (``Retry-After``)."""

    def __init__(self, message: str, path: str = "", *, throttled: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message, path)
        self.throttled = throttled
        self.retry_after = retry_after


class AmbiguousRenameError(StoreError):
    """A rename was retried, the source is gone, and the destination cannot be proven to be it."""


class UnsafePathError(StoreError):
    """A rename or directory creation beneath a local destination would go through a symbolic
    link (or ``..`` out of the destination), so it might write outside it; refused, unless the
    configuration says to follow links."""


class UntrustedManifestError(ManifestCommitterError):
    """Job commit refused its input. ``problems`` lists every offending entry, one line each."""

    def __init__(self, problems: Sequence[str], shown: int = 20) -> None:
        self.problems = list(problems)
        head = "\n  ".join(self.problems[:shown])
        more = len(self.problems) - shown
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"job commit refused {len(self.problems)} problem(s) in its manifests; "
            f"no file was moved:\n  {head}{tail}"
        )


class JobConflictError(ManifestCommitterError):
    """Another job, or an earlier run of this one, owns what this job needs."""


class CommitFailedError(ManifestCommitterError):
    """A job commit stage failed. ``stage`` names it; the cause is chained."""

    def __init__(self, stage: str, message: str) -> None:
        self.stage = stage
        super().__init__(f"job commit failed in stage '{stage}': {message}")
