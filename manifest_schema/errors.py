"""The root of every exception this project raises, and the format-error family.

The root lives here, in the lowest package, so that both ``manifest_schema`` and ``committer``
can share it without ``manifest_schema`` depending on the engine.
"""

from __future__ import annotations


class ManifestCommitterError(Exception):
    """Root of all errors raised by spark-manifest-committer."""


class FormatError(ManifestCommitterError):
    """A document (task manifest, ``_SUCCESS``, summary) is not valid.

    ``source`` names the file (or ``<memory>``), ``field`` the JSON path of the offending value
    (empty when the document as a whole is unreadable), and ``reason`` says what is wrong.
    """

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        where = f" field '{field}'" if field else ""
        super().__init__(f"{source}:{where} {reason}")
