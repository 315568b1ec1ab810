"""The shim jar: the packaged one for the installed Spark line, else built from source (cached,
rebuilt on change), and a clear error when neither is possible."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from committer.spark import build, jarbuild
from committer.spark.errors import JarUnavailableError

pytestmark = pytest.mark.spark


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(build.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(build.ENV_JAR, raising=False)
    return tmp_path / "cache"


def _edit_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    changed = tmp_path / "src"
    shutil.copytree(jarbuild.SOURCE_ROOT, changed)
    registry = changed / "manifestcommitter" / "spark" / "EngineRegistry.java"
    registry.write_text(registry.read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    monkeypatch.setattr(jarbuild, "SOURCE_ROOT", changed)


def test_the_installed_spark_gets_its_packaged_jar_without_a_jdk(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make setup` (like a wheel) compiles one jar per Spark line; a driver needs no javac.
    monkeypatch.setattr(build, "find_javac", lambda: None)
    jar = build.jar_path()
    line = jarbuild.line_for(build.spark_version())
    assert line is not None
    assert jar == build.PREBUILT_ROOT / line.jar_name
    assert line.scala == build.scala_version(build.spark_jars_dir())
    with zipfile.ZipFile(jar) as archive:
        assert "manifestcommitter/spark/ManifestCommitProtocol.class" in archive.namelist()
        manifest = archive.read("META-INF/MANIFEST.MF").decode()
    assert f"Spark-Version: {line.compile_against}" in manifest
    assert not cache.exists(), "a packaged jar must not trigger a build"


def test_session_runs_the_packaged_jar(spark: Any) -> None:
    jars = spark.sparkContext.getConf().get("spark.jars")
    line = jarbuild.line_for(build.spark_version())
    assert line is not None
    assert str(build.PREBUILT_ROOT / line.jar_name) in jars.split(","), jars


def _fake_prebuilt(root: Path, sources: str) -> None:
    root.mkdir()
    entries = []
    for line in jarbuild.spark_lines():
        (root / line.jar_name).write_bytes(b"jar")
        entries.append({"jar": line.jar_name, "line": line.name, "scala": line.scala,
                        "java_release": line.java_release,
                        "compiled_against": line.compile_against})
    (root / jarbuild.INDEX_NAME).write_text(json.dumps({"sources": sources, "jars": entries}))


@pytest.mark.parametrize(
    ("version", "scala", "expected"),
    [
        ("3.5.7", "2.12", "committer-shim-spark3.5_2.12.jar"),
        ("3.5.0", None, "committer-shim-spark3.5_2.12.jar"),
        ("4.0.1", "2.13", "committer-shim-spark4_2.13.jar"),
        ("4.3.0", "2.13", "committer-shim-spark4_2.13.jar"),
        ("3.5.7", "2.13", None),  # a Scala 2.13 build of Spark 3.5: compiled from source
        ("3.4.4", "2.12", None),
        ("5.0.0", "2.13", None),
        ("35.0.0", "2.13", None),
    ],
)
def test_prebuilt_jar_matches_spark_line_and_scala(
    tmp_path: Path, version: str, scala: str | None, expected: str | None
) -> None:
    root = tmp_path / "jars"
    _fake_prebuilt(root, jarbuild.sources_digest())
    found = build.prebuilt_jar(version, scala, root)
    assert (found.name if found else None) == expected


def test_prebuilt_jars_of_other_sources_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "jars"
    _fake_prebuilt(root, jarbuild.sources_digest())
    assert build.prebuilt_jar("4.3.0", "2.13", root) is not None
    _edit_sources(tmp_path, monkeypatch)
    assert build.prebuilt_jar("4.3.0", "2.13", root) is None


@pytest.mark.skipif(build.find_javac() is None, reason="needs a JDK")
def test_built_once_then_cached_and_rebuilt_when_sources_change(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = build.build_jar()
    assert first.is_relative_to(cache)
    with zipfile.ZipFile(first) as jar:
        assert "manifestcommitter/spark/ManifestCommitProtocol.class" in jar.namelist()
    stamp = first.stat().st_mtime_ns
    assert build.build_jar() == first
    assert first.stat().st_mtime_ns == stamp, "an unchanged source tree must not be rebuilt"

    # Edited sources: the packaged jar no longer fits, jar_path compiles them.
    _edit_sources(tmp_path, monkeypatch)
    second = build.jar_path()
    assert second != first and second.is_relative_to(cache) and second.is_file()


def test_without_a_fitting_jar_or_a_jdk_the_error_says_what_to_do(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "find_javac", lambda: None)
    monkeypatch.setattr(build, "spark_version", lambda: "5.0.0")
    with pytest.raises(JarUnavailableError, match=r"pyspark 5\.0\.0.*Spark 3\.5\.x.*Spark 4\.x"
                       r".*javac.*--output DIR.*SPARK_MANIFEST_COMMITTER_JAR"):
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


def test_cli_output_directory(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build.main(["--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(tmp_path / "out" / build.JAR_NAME)
    assert Path(printed).read_bytes() == build.jar_path().read_bytes()
