"""Fixtures shared by every suite. Keep this small: suites add their own conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

HADOOP_FIXTURES = Path(__file__).parent / "data" / "hadoop"


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    """An empty destination directory whose path needs URI escaping (HADOOP-17112)."""
    path = tmp_path / "dest dir ü #%"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def hadoop_fixtures() -> Path:
    """The documents Hadoop's own ManifestCommitter wrote (see tests/data/hadoop/README.md)."""
    return HADOOP_FIXTURES
