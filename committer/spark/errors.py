"""Errors of the Spark integration."""

from __future__ import annotations

from committer.errors import ConfigError

__all__ = ["JarUnavailableError"]


class JarUnavailableError(ConfigError):
    """The shim jar is not available and cannot be built here."""
