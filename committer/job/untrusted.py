"""Checks that treat every manifest as hostile input.

A manifest is written by a task on another machine, read back from shared storage, and could be
corrupt, stale, from another job, or crafted. Before any file moves, every entry must:
- name a source inside *its own* task attempt's working directory;
- name a destination inside the destination directory (or a root the driver allowed, such as a
  Spark custom partition location), on the same store, outside ``_temporary`` and not a marker;
- contain no empty, ``.`` or ``..`` path segments (no climbing out after decoding).
Each problem is a line naming the manifest, the entry and the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from committer.layout import SUCCESS_MARKER, TEMPORARY_DIR
from manifest_schema.uris import uri_to_location


def _plain(rel: str) -> bool:
    # Fast path first: most paths contain neither "//" nor "/." at all.
    if "//" not in rel and "/." not in rel and not rel.startswith("."):
        return True
    return all(p not in ("", ".", "..") for p in rel.split("/"))


class EntryChecker:
    """Validates the entries of one job's manifests against its layout."""

    def __init__(self, dest: str, tasks_dir: str, extra_roots: Sequence[str] = ()) -> None:
        self.dest = dest.rstrip("/")
        self.dest_prefix = self.dest + "/"
        self.tasks_prefix = tasks_dir.rstrip("/") + "/"
        self.extra_prefixes = tuple(r.rstrip("/") + "/" for r in extra_roots)

    def source(self, uri: str, task_attempt_id: str) -> tuple[str | None, str]:
        """``(location, "")`` when the source is acceptable, else ``(None, reason)``."""
        try:
            loc = uri_to_location(uri)
        except ValueError as e:
            return None, str(e)
        own = f"{self.tasks_prefix}{task_attempt_id}/"
        if not loc.startswith(own):
            return None, f"source {uri} is outside the task attempt directory {own}"
        if not _plain(loc[len(own) :]):
            return None, f"source {uri} has empty, '.' or '..' path segments"
        return loc, ""

    def destination(self, uri: str) -> tuple[str | None, str]:
        try:
            loc = uri_to_location(uri)
        except ValueError as e:
            return None, str(e)
        if loc.startswith(self.dest_prefix):
            rel = loc[len(self.dest_prefix) :]
            if not _plain(rel):
                return None, f"destination {uri} has empty, '.' or '..' path segments"
            top = rel.split("/", 1)[0]
            if top == TEMPORARY_DIR or rel == SUCCESS_MARKER:
                return None, f"destination {uri} is the committer's own {top}"
            return loc, ""
        for prefix in self.extra_prefixes:
            if loc.startswith(prefix) and _plain(loc[len(prefix) :]):
                return loc, ""
        return None, f"destination {uri} is outside the destination directory {self.dest}"

    def is_root(self, location: str) -> bool:
        """The destination itself, or one of the extra roots."""
        loc = location.rstrip("/") + "/"
        return loc == self.dest_prefix or loc in self.extra_prefixes

    def directory(self, uri: str) -> tuple[str | None, str]:
        """Like :meth:`destination`, but the destination and extra roots themselves are fine."""
        try:
            decoded = uri_to_location(uri)
        except ValueError as e:
            return None, str(e)
        if self.is_root(decoded):
            return decoded.rstrip("/"), ""
        loc, reason = self.destination(uri)
        if loc is None and reason.startswith("destination"):
            reason = "directory" + reason[len("destination") :]
        return loc, reason
