"""Checks that treat every manifest as hostile input.

A manifest is written by a task on another machine, read back from shared storage, and could be
corrupt, stale, from another job, or crafted. Before any file moves, every entry must:
- name a source inside *its own* task attempt's working directory;
- name a destination inside the destination directory (or a root the driver allowed, such as a
  Spark custom partition location), on the same store, outside ``_temporary`` and not a marker;
- contain no empty, ``.`` or ``..`` path segments (no climbing out after decoding).
Each problem is a line naming the manifest, the entry and the reason.

Two ways to check: entry by entry (:meth:`EntryChecker.source`, :meth:`~EntryChecker.destination`,
:meth:`~EntryChecker.directory`), which explains every problem; and a whole manifest at once
(:meth:`EntryChecker.plain_files`, :meth:`~EntryChecker.plain_directories`), which answers only
for the common case: every path under its expected prefix, with nothing to decode and nothing
unusual in it. It runs the checks as a few string searches over all entries together (a job
commit checks millions of entries, and per-entry Python calls were most of its load stage);
when it cannot vouch for every entry it returns ``None`` and the caller checks entry by entry.
It never accepts what the entry-by-entry path would reject. Where the optional C module
``_checks`` was built, it answers first, in one pass, for manifests written in ASCII; it can
only decline more than the Python version (anything else, it hands to that version).

:func:`note_destinations` is the other per-entry pass of the load stage: the bookkeeping that
finds destinations claimed twice, in C where that was built.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from committer.layout import SUCCESS_MARKER, TEMPORARY_DIR
from manifest_schema import DirStatus
from manifest_schema.uris import location_to_uri, uri_to_location

try:  # the same whole-manifest checks in C (setup.py builds them where a compiler is present)
    from committer.job.stages import _checks
except ImportError:
    _checks = None  # type: ignore[assignment]

# (source location, destination location, size, etag), as the plan holds them
Entry = tuple[str, str, int, str | None]

_STR, _INT, _DICT = {str}, {int}, {dict}
_ETAG_TYPES = {str, type(None)}
_DIR_STATUSES = frozenset(int(s) for s in DirStatus)
_RESERVED = (TEMPORARY_DIR, SUCCESS_MARKER)
_DEST = itemgetter(1)


def note_destinations(entries: list[Entry], seen: set[int], suspects: set[int],
                      parents: set[str]) -> None:
    """Note the destinations of one manifest's checked ``entries``: the hash of each goes into
    ``seen``, and into ``suspects`` when it was seen before (in this manifest or an earlier
    one: the same destination claimed twice, or a hash collision, which a later pass over the
    plan tells apart); the parent directory of each goes into ``parents``. Hashes keep the
    memory of a million destinations small."""
    if _checks is not None:
        _checks.note_destinations(entries, seen, suspects, parents)
        return
    dests = list(map(_DEST, entries))
    mine = set(map(hash, dests))
    if len(mine) != len(dests):  # two destinations of this manifest share a hash
        suspects.update(h for h, n in Counter(map(hash, dests)).items() if n > 1)
    suspects.update(seen.intersection(mine))
    seen.update(mine)
    parents.update([d.rpartition("/")[0] for d in dests])


def _uri_prefix(location: str) -> str | None:
    """The URI prefix whose extensions by a plain relative path decode to ``location`` + that
    path, or ``None`` when the location is not written plainly in URIs (so no fast path)."""
    uri = location_to_uri(location)
    if "%" in uri:
        return None
    try:
        if uri_to_location(uri + "x") != location + "x":
            return None
    except ValueError:
        return None
    return uri


def _all_plain(rels: list[str], reserved: bool = False) -> bool:
    """Every relative path non-empty, with no empty or '.'-prefixed (so no '.' or '..')
    segment, no NUL and no '%' escape: then it decodes to itself and cannot climb out.
    ``reserved``: also none naming the committer's own ``_temporary`` or ``_SUCCESS`` anywhere
    (stricter than :meth:`EntryChecker.destination`, which refuses only the top level; the
    entry-by-entry check decides the rest). Joined with "/", an empty path, a leading or
    trailing "/" and an empty segment all show as "//", a '.'-segment as "/."."""
    joined = "/" + "/".join(rels) + "/"
    if "//" in joined or "/." in joined or "%" in joined or "\0" in joined:
        return False
    return not reserved or not any(word in joined for word in _RESERVED)


def _plain(rel: str) -> bool:
    # Fast path first: most paths contain neither "//" nor "/." at all.
    if "//" not in rel and "/." not in rel and not rel.startswith("."):
        return True
    return all(p not in ("", ".", "..") for p in rel.split("/"))


def _locations(uris: list[str], uri_prefix: str, prefix: str) -> list[str]:
    """The locations of URIs known to be ``uri_prefix`` + a plain path."""
    if uri_prefix == prefix:
        return uris
    if uri_prefix.endswith(prefix):
        cut = len(uri_prefix) - len(prefix)
        return [u[cut:] for u in uris]
    cut = len(uri_prefix)
    return [prefix + u[cut:] for u in uris]


class EntryChecker:
    """Validates the entries of one job's manifests against its layout."""

    def __init__(self, dest: str, tasks_dir: str, extra_roots: Sequence[str] = ()) -> None:
        self.dest = dest.rstrip("/")
        self.dest_prefix = self.dest + "/"
        self.tasks_prefix = tasks_dir.rstrip("/") + "/"
        self.extra_prefixes = tuple(r.rstrip("/") + "/" for r in extra_roots)
        self._dest_uri = _uri_prefix(self.dest_prefix)
        self._root_uri = _uri_prefix(self.dest)

    def plain_files(self, files: Any, task_attempt_id: str) -> list[Entry] | None:
        """All entries of a manifest's ``files`` array at once, or ``None`` when any one needs
        the entry-by-entry check (which may then accept or explain it). Accepted entries are
        well-typed, unique, sources inside the attempt's directory and destinations inside the
        destination (not ``_temporary``, not the marker), all plain paths."""
        own = f"{self.tasks_prefix}{task_attempt_id}/"
        own_uri, dest_uri = _uri_prefix(own), self._dest_uri
        if own_uri is None or dest_uri is None or type(files) is not list or not files:
            return None
        if _checks is not None:
            found = _checks.files(files, own_uri, dest_uri, own, self.dest_prefix, _RESERVED)
            if found is not None:
                return found
        if set(map(type, files)) != _DICT:
            return None
        try:
            srcs = [f["s"] for f in files]
            dsts = [f["d"] for f in files]
            sizes = [f["z"] for f in files]
        except KeyError:
            return None
        etags = [f.get("e") for f in files]
        if (set(map(type, srcs)) != _STR or set(map(type, dsts)) != _STR
                or set(map(type, sizes)) != _INT or not set(map(type, etags)) <= _ETAG_TYPES
                or min(sizes) < 0):
            return None
        n = len(files)
        if len(set(srcs)) != n or len(set(dsts)) != n:
            return None
        cut_s, cut_d = len(own_uri), len(dest_uri)
        if not (all(map(str.startswith, srcs, [own_uri] * n))
                and all(map(str.startswith, dsts, [dest_uri] * n))):
            return None
        if not (_all_plain([s[cut_s:] for s in srcs])
                and _all_plain([d[cut_d:] for d in dsts], reserved=True)):
            return None
        return list(zip(_locations(srcs, own_uri, own),
                        _locations(dsts, dest_uri, self.dest_prefix), sizes, etags, strict=True))

    def plain_directories(self, dirs: Any) -> dict[str, int] | None:
        """Like :meth:`plain_files` for a manifest's ``directories`` array: ``location -> level``
        of every directory to create (the destination itself is left out: it exists), or
        ``None`` when any entry needs the entry-by-entry check."""
        if type(dirs) is not list:
            return None
        if not dirs:
            return {}
        dest_uri, root_uri = self._dest_uri, self._root_uri
        if dest_uri is None or root_uri is None:
            return None
        if _checks is not None:
            found = _checks.directories(dirs, dest_uri, root_uri, self.dest_prefix,
                                        _DIR_STATUSES, _RESERVED)
            if found is not None:
                return found
        if set(map(type, dirs)) != _DICT:
            return None
        try:
            uris = [d["d"] for d in dirs]
        except KeyError:
            return None
        statuses = [d.get("t", 0) for d in dirs]
        levels = [d.get("l", 0) for d in dirs]
        if (set(map(type, uris)) != _STR or set(map(type, statuses)) != _INT
                or set(map(type, levels)) != _INT or not set(statuses) <= _DIR_STATUSES
                or min(levels) < 0):
            return None
        if root_uri in uris or dest_uri in uris:  # the destination itself: nothing to create
            kept = [(u, lvl) for u, lvl in zip(uris, levels, strict=True)
                    if u not in (root_uri, dest_uri)]
            uris, levels = [u for u, _ in kept], [lvl for _, lvl in kept]
        n = len(uris)
        if not all(map(str.startswith, uris, [dest_uri] * n)):
            return None
        cut = len(dest_uri)
        if uris and not _all_plain([u[cut:] for u in uris], reserved=True):
            return None
        # the first entry of a directory listed twice wins, as in the entry-by-entry check
        return dict(zip(reversed(_locations(uris, dest_uri, self.dest_prefix)), reversed(levels),
                        strict=True))

    def source(self, uri: str, task_attempt_id: str) -> tuple[str | None, str]:
        """``(location, "")`` when the source is acceptable, else ``(None, reason)``."""
        try:
            loc = uri_to_location(uri)
        except ValueError as e:
            return None, str(e)
        if "\0" in loc:  # no system call takes it: refused now, not halfway through the renames
            return None, f"source {uri!r} contains a NUL character"
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
        if "\0" in loc:
            return None, f"destination {uri!r} contains a NUL character"
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
