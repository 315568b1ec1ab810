"""Rename stage helpers: which task directories a chunk of renames empties."""

from __future__ import annotations

from committer.job.stages.rename_files import emptied_directories

TASKS = "/out/_temporary/manifest_j/00/tasks"
ATTEMPT = f"{TASKS}/attempt_j_m_000001_0"


def _entries(sources: list[str]) -> list[tuple[str, str, int, str | None]]:
    return [(s, "/out/x", 0, None) for s in sources]


def test_every_directory_comes_before_its_parent() -> None:
    got = emptied_directories(_entries([
        f"{ATTEMPT}/p=1/q=2/a", f"{ATTEMPT}/p=1/b", f"{ATTEMPT}/p=10/c", f"{ATTEMPT}/d",
        f"{ATTEMPT}/p=1/q=2/e"]), TASKS)
    assert sorted(got) == sorted([f"{ATTEMPT}/p=1/q=2", f"{ATTEMPT}/p=1", f"{ATTEMPT}/p=10",
                                  ATTEMPT])
    for i, d in enumerate(got):  # no directory is listed after one of its ancestors
        assert not any(d.startswith(earlier + "/") for earlier in got[:i])


def test_nothing_at_or_above_the_tasks_directory() -> None:
    assert emptied_directories(_entries([f"{TASKS}/stray", "/elsewhere/a/b"]), TASKS) == []
    assert emptied_directories(_entries([f"{ATTEMPT}/a"]), TASKS + "/") == [ATTEMPT]
    assert emptied_directories([], TASKS) == []
