"""Building the shim jar from source: cached, rebuilt on change, a clear error without a JDK."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from committer.spark import build
from committer.spark.errors import JarUnavailableError

pytestmark = pytest.mark.spark


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(build.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(build.ENV_JAR, raising=False)
    return tmp_path / "cache"


@pytest.mark.skipif(build.find_javac() is None, reason="needs a JDK")
def test_built_once_then_cached_and_rebuilt_when_sources_change(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = build.jar_path()
    assert first.is_relative_to(cache)
    with zipfile.ZipFile(first) as jar:
        assert "manifestcommitter/spark/ManifestCommitProtocol.class" in jar.namelist()
    stamp = first.stat().st_mtime_ns
    assert build.jar_path() == first
    assert first.stat().st_mtime_ns == stamp, "an unchanged source tree must not be rebuilt"

    changed = tmp_path / "src"
    shutil.copytree(build.SOURCE_ROOT, changed)
    registry = changed / "manifestcommitter" / "spark" / "EngineRegistry.java"
    registry.write_text(registry.read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    monkeypatch.setattr(build, "SOURCE_ROOT", changed)
    second = build.jar_path()
    assert second != first and second.is_file()


def test_without_a_jdk_the_error_says_what_to_do(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "find_javac", lambda: None)
    with pytest.raises(JarUnavailableError, match=r"--output DIR.*SPARK_MANIFEST_COMMITTER_JAR"):
        build.jar_path()


def test_prebuilt_jar_from_the_environment(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "prebuilt.jar"
    monkeypatch.setenv(build.ENV_JAR, str(jar))
    with pytest.raises(JarUnavailableError, match="does not name a file"):
        build.jar_path()
    jar.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    assert build.jar_path() == jar
    assert not cache.exists(), "a prebuilt jar must not trigger a build"


@pytest.mark.skipif(build.find_javac() is None, reason="needs a JDK")
def test_cli_output_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build.main(["--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(tmp_path / "out" / build.JAR_NAME)
    assert zipfile.is_zipfile(printed)
