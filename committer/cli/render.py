"""Output: rich tables for people, stable JSON for machines, progress bars on stderr.

Colour and progress bars appear only on a terminal (rich's own detection; ``NO_COLOR`` is
honoured). When stdout is not a terminal, tables are laid out 120 columns wide (or ``COLUMNS``)
so that piped output keeps long paths on one line more often than rich's default of 80.
JSON goes through :func:`emit_json`: sorted keys, two-space indent, a ``format`` field naming
the document and its version (documented in docs/cli.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Any

import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from committer.progress import ProgressCallback

_PIPE_WIDTH = 120


def _width(stream: IO[str]) -> int | None:
    env = os.environ.get("COLUMNS", "")
    if env.isdigit():
        return int(env)
    return None if stream.isatty() else _PIPE_WIDTH


class _TrimmedLines:
    """A text stream that drops trailing blanks from each line: rich pads table cells to the
    table's width, which is noise in files, diffs and pasted documentation."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._tail = ""

    def write(self, text: str) -> int:
        lines = (self._tail + text).split("\n")
        self._tail = lines.pop()
        if lines:
            self._out.write("".join(line.rstrip() + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._tail:
            self._out.write(self._tail.rstrip())
            self._tail = ""
        self._out.flush()

    def isatty(self) -> bool:
        return False


def stdout_console() -> Console:
    if sys.stdout.isatty():
        return Console(file=sys.stdout, highlight=False)
    return Console(file=_TrimmedLines(sys.stdout), width=_width(sys.stdout),  # type: ignore[arg-type]
                   highlight=False, soft_wrap=False)


def stderr_console() -> Console:
    return Console(file=sys.stderr, width=_width(sys.stderr), highlight=False, stderr=True)


def emit_json(document: Mapping[str, Any]) -> None:
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.flush()


def json_line(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]],
          *, right: Sequence[str] = ()) -> Table:
    """A table; the columns named in ``right`` (numbers) are right-aligned."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False,
              min_width=len(title or ""))
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


def key_values(title: str | None, pairs: Sequence[tuple[str, str]]) -> Table:
    """A two-column "what: value" table without header."""
    t = Table(title=title, title_justify="left", show_header=False, show_edge=False,
              pad_edge=False, box=None)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for k, v in pairs:
        t.add_row(k, v)
    return t


class ProgressBars:
    """Turns the engine's ``(stage, done, total)`` callbacks into one bar per stage.

    Bars go to stderr and only when stderr is a terminal, so pipes and JSON stay clean. The
    callback may be called from worker threads; rich's Progress is thread-safe.
    """

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> ProgressBars:
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=stderr_console(), transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, stage: str, done: int, total: int) -> None:
        if self._progress is None:
            return
        task = self._tasks.get(stage)
        if task is None:
            task = self._tasks[stage] = self._progress.add_task(stage.replace("_", " "),
                                                                total=total or None)
        self._progress.update(task, completed=done, total=total or None)

    @property
    def callback(self) -> ProgressCallback | None:
        return self.update if self.enabled else None


@contextmanager
def progress_bars(enabled: bool | None = None) -> Iterator[ProgressBars]:
    with ProgressBars(enabled) as bars:
        yield bars
