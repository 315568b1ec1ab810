"""``diff A B``: files added, removed and changed in size between two jobs.

A and B are two task manifests, two job attempt directories (or directories of manifests), or
two ``_SUCCESS`` / summary files (which record only the first destinations and no sizes, so
only names are compared). Files are matched by destination relative to each side's
destination directory, so the same job written to two places compares equal.

Both sides are streamed into a temporary SQLite database on local disk and compared there:
memory stays flat however many files the jobs have. ``--limit`` bounds how many of each kind are
listed (0 lists all).

Exit status: 0 the same files; 1 they differ; 2 bad arguments or unreadable input.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, CliError, Command
from committer.cli.documents import (
    Found,
    Kind,
    Loaded,
    ManifestFile,
    dest_from_task_attempt_dir,
    identify,
    iter_manifests,
)
from committer.cli.inspect import read_threads
from committer.cli.paths import open_location
from committer.cli.units import human_size
from committer.store import ManagedStore
from manifest_schema import FormatError, iter_file_entries
from manifest_schema.uris import uri_to_location

FORMAT = "manifest-committer.diff/1"
_MANIFESTS = (Kind.MANIFEST, Kind.JOB_ATTEMPT, Kind.MANIFEST_DIR)
_SUMMARIES = (Kind.SUCCESS, Kind.SUMMARY)


@dataclass
class Side:
    found: Found
    store: ManagedStore
    dest: str | None = None
    files: int = 0
    bytes: int = 0
    unreadable: int = 0

    def key(self, uri: str) -> str:
        try:
            loc = uri_to_location(uri)
        except ValueError:
            return uri
        if self.dest is not None and loc.startswith(self.dest + "/"):
            return loc[len(self.dest) + 1:]
        return loc

    def entries(self) -> Iterator[tuple[str, int | None]]:
        f = self.found
        if f.kind in _SUMMARIES:
            assert f.success is not None
            self.dest = f.dest or f.success.diagnostics.get("destination")
            for name in f.success.filenames:
                self.files += 1
                yield self.key(name), None
            return
        self.dest = f.dest
        if f.kind is Kind.MANIFEST:
            assert f.document is not None
            loaded: Iterator[Loaded] = iter([Loaded(ManifestFile(f.location, 0, None),
                                                    f.document)])
        else:
            loaded = iter_manifests(self.store, f.manifests, read_threads(self.store))
        for item in loaded:
            if item.doc is None:
                self.unreadable += 1
                continue
            if self.dest is None:
                tad = item.doc.get("taskAttemptDir")
                if isinstance(tad, str):
                    self.dest = dest_from_task_attempt_dir(tad)
            try:
                for _s, d, z, _e in iter_file_entries(item.doc, item.file.path):
                    self.files += 1
                    self.bytes += z
                    yield self.key(d), z
            except FormatError:
                self.unreadable += 1

    def to_json(self) -> dict[str, Any]:
        return {"kind": str(self.found.kind), "path": self.found.location,
                "destination": self.dest, "files": self.files,
                "bytes": None if self.found.kind in _SUMMARIES else self.bytes,
                "unreadable_manifests": self.unreadable}


def _load(db: sqlite3.Connection, table: str, side: Side) -> None:
    db.execute(f"CREATE TABLE {table} (k TEXT PRIMARY KEY, z INTEGER)")
    db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", side.entries())


def _rows(db: sqlite3.Connection, sql: str, limit: int) -> Iterator[tuple[Any, ...]]:
    cur = db.execute(sql + ("" if limit == 0 else f" LIMIT {int(limit)}"))
    yield from cur


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="manifest, job attempt directory or _SUCCESS")
    p.add_argument("b", metavar="B", help="the same kind of thing as A")
    p.add_argument("--limit", type=int, default=50, metavar="N",
                   help="list at most N files of each kind (default 50; 0 = all)")


def _run(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise CliError("--limit must not be negative")
    sides = []
    for text in (args.a, args.b):
        location, store = open_location(args, text)
        found = identify(store, location)
        if found.kind not in _MANIFESTS + _SUMMARIES:
            raise CliError(f"{location}: is a {found.kind}; diff compares manifests, job "
                           "attempt directories or _SUCCESS files")
        sides.append(Side(found, store))
    a, b = sides
    if (a.found.kind in _SUMMARIES) != (b.found.kind in _SUMMARIES):
        raise CliError("diff compares like with like: two _SUCCESS/summary files, or two sets "
                       "of manifests (a manifest or a job attempt directory)")
    sized = a.found.kind not in _SUMMARIES
    with tempfile.TemporaryDirectory(prefix="manifest-committer-diff-") as tmp:
        db = sqlite3.connect(os.path.join(tmp, "diff.db"))
        try:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            with render.progress_bars() as bars:
                bars.update("reading A", 0, 2)
                _load(db, "a", a)
                bars.update("reading B", 1, 2)
                _load(db, "b", b)
            added_sql = "SELECT b.k, b.z FROM b LEFT JOIN a ON a.k = b.k WHERE a.k IS NULL"
            removed_sql = "SELECT a.k, a.z FROM a LEFT JOIN b ON b.k = a.k WHERE b.k IS NULL"
            changed_sql = ("SELECT a.k, a.z, b.z FROM a JOIN b ON a.k = b.k "
                           "WHERE a.z IS NOT b.z")
            counts = {name: db.execute(f"SELECT COUNT(*) FROM ({sql})").fetchone()[0]
                      for name, sql in (("added", added_sql), ("removed", removed_sql),
                                        ("changed", changed_sql))}
            lists = {
                "added": [{"path": k, "size": z}
                          for k, z in _rows(db, added_sql + " ORDER BY b.k", args.limit)],
                "removed": [{"path": k, "size": z}
                            for k, z in _rows(db, removed_sql + " ORDER BY a.k", args.limit)],
                "changed": [{"path": k, "size_a": za, "size_b": zb} for k, za, zb in
                            _rows(db, changed_sql + " ORDER BY a.k", args.limit)],
            }
        finally:
            db.close()
    same = not any(counts.values())
    if args.json:
        render.emit_json({
            "format": FORMAT, "a": a.to_json(), "b": b.to_json(), "sizes_compared": sized,
            "identical": same, "limit": args.limit,
            **{name: {"count": counts[name], "files": lists[name]} for name in counts},
        })
    else:
        _print(a, b, counts, lists, sized)
    return EXIT_OK if same else EXIT_PROBLEMS


def _print(a: Side, b: Side, counts: dict[str, int], lists: dict[str, list[dict[str, Any]]],
           sized: bool) -> None:
    console = render.stdout_console()

    def size(v: Any) -> str:
        return "-" if v is None else human_size(int(v))

    console.print(render.table(None, ["", "path", "files", "bytes"], [
        ["A", a.found.location, f"{a.files:,}", size(a.bytes) if sized else "-"],
        ["B", b.found.location, f"{b.files:,}", size(b.bytes) if sized else "-"],
    ], right=["files", "bytes"]))
    if not sized:
        console.print("(_SUCCESS records only the first destination names and no sizes)")
    console.print(f"added {counts['added']:,}, removed {counts['removed']:,}, changed in size "
                  f"{counts['changed']:,}")
    for name, title in (("added", "Added (in B, not in A)"),
                        ("removed", "Removed (in A, not in B)")):
        if lists[name]:
            shown = f" (first {len(lists[name])})" if len(lists[name]) < counts[name] else ""
            console.print(render.table(title + shown, ["path", "size"],
                                       [[r["path"], size(r["size"])] for r in lists[name]],
                                       right=["size"]))
    if lists["changed"]:
        shown = (f" (first {len(lists['changed'])})" if len(lists["changed"]) < counts["changed"]
                 else "")
        console.print(render.table("Changed in size" + shown, ["path", "A", "B"],
                                   [[r["path"], size(r["size_a"]), size(r["size_b"])]
                                    for r in lists["changed"]], right=["A", "B"]))


COMMAND = Command(
    name="diff",
    help="files added, removed and changed in size between two manifests, jobs or _SUCCESS",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
