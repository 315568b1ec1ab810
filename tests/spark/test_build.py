"""The shim jar: the packaged one for the installed Spark line, else the one built in the
checkout for the installed Spark, else built from source (cached, rebuilt on change), and a
clear error when none is possible."""

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
    registry = changed / "manifestcommitter" / "spark" / "TaskCommitInfo.java"
    registry.write_text(registry.read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    monkeypatch.setattr(jarbuild, "SOURCE_ROOT", changed)


def test_the_installed_spark_gets_the_jar_setup_built_without_a_jdk(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make setup` compiles the shim in place against the pyspark it installed (a wheel would
    # carry the packaged jar of the line instead); a driver needs no javac.
    monkeypatch.setattr(build, "find_javac", lambda: None)
    jar = build.jar_path()
    version = build.spark_version()
    line = jarbuild.line_for(version)
    assert line is not None
    packaged = build.prebuilt_jar(version, build.scala_version(build.spark_jars_dir()))
    if packaged is None:
        assert jar.is_relative_to(build.IN_PLACE_ROOT)
        compiled_against = version
    else:  # packaged jars left in this checkout by an older install, still of these sources
        assert jar == packaged == build.PREBUILT_ROOT / line.jar_name
        compiled_against = line.compile_against
    with zipfile.ZipFile(jar) as archive:
        assert "manifestcommitter/spark/ManifestCommitProtocol.class" in archive.namelist()
        manifest = archive.read("META-INF/MANIFEST.MF").decode()
    assert f"Spark-Version: {compiled_against}\r\n" in manifest
    assert not cache.exists(), "a jar made at install must not trigger a build"


def test_session_runs_the_jar_made_at_install(spark: Any) -> None:
    jars = spark.sparkContext.getConf().get("spark.jars")
    jar = build.jar_path()
    assert jar.is_relative_to(build.PREBUILT_ROOT), jar  # packaged, or built in place
    assert str(jar) in jars.split(","), jars


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

    # Edited sources: neither the packaged jar nor the one built in place fits, jar_path
    # compiles them.
    _edit_sources(tmp_path, monkeypatch)
    second = build.jar_path()
    assert second != first and second.is_relative_to(cache) and second.is_file()


@pytest.mark.parametrize("packaged", [True, False])
def test_without_a_fitting_jar_or_a_jdk_the_error_says_what_to_do(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packaged: bool
) -> None:
    # A wheel (packaged jars) or a checkout (jars built in place by `make setup`, if any).
    root = tmp_path / "jars"
    if packaged:
        _fake_prebuilt(root, jarbuild.sources_digest())
    else:
        (root / "in-place").mkdir(parents=True)
    monkeypatch.setattr(build, "PREBUILT_ROOT", root)
    monkeypatch.setattr(build, "IN_PLACE_ROOT", root / "in-place")
    monkeypatch.setattr(build, "find_javac", lambda: None)
    monkeypatch.setattr(build, "spark_version", lambda: "5.0.0")
    carried = (r"the prebuilt jars \(Spark 3\.5\.x.*Spark 4\.x.*\) serve neither" if packaged
               else r"this installation carries no prebuilt jar, nor do the jars built in this "
               r"checkout .*`make setup` builds one")
    with pytest.raises(JarUnavailableError, match=rf"pyspark 5\.0\.0: {carried}.*javac.*"
                       r"--output DIR.*SPARK_MANIFEST_COMMITTER_JAR"):
        build.jar_path()
    assert not cache.exists()


@pytest.mark.skipif(build.find_javac() is None, reason="needs a JDK")
def test_built_in_place_for_the_installed_spark_only(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # One checkout, two environments (.venv on Spark 4, .venv-spark35 on 3.5): each finds the
    # jar built against its own Spark, never the other's, nor one compiled against a release
    # of its line it does not run.
    packaged_root, in_place_root = tmp_path / "jars", tmp_path / "in-place"
    monkeypatch.setattr(build, "PREBUILT_ROOT", packaged_root)
    monkeypatch.setattr(build, "IN_PLACE_ROOT", in_place_root)
    version = build.spark_version()
    scala = build.scala_version(build.spark_jars_dir())
    assert build.in_place_jar(version, scala) is None

    assert build.main(["--in-place"]) == 0
    jar = Path(capsys.readouterr().out.strip())
    assert jar.is_relative_to(in_place_root) and jar.is_file()
    with zipfile.ZipFile(jar) as archive:
        manifest = archive.read("META-INF/MANIFEST.MF").decode()
    assert f"Spark-Version: {version}\r\n" in manifest
    stamp = jar.stat().st_mtime_ns
    assert build.main(["--in-place"]) == 0
    assert Path(capsys.readouterr().out.strip()) == jar
    assert jar.stat().st_mtime_ns == stamp, "an unchanged source tree must not be rebuilt"

    monkeypatch.setattr(build, "find_javac", lambda: None)
    assert build.in_place_jar(version, scala) == jar
    assert build.jar_path() == jar
    other_scala = "2.12" if scala != "2.12" else "2.13"
    for other in ("3.5.0", "3.5.7", "4.0.0", "4.3.0", "4.3.1"):
        if other != version:
            assert build.in_place_jar(other, scala) is None, other
    assert build.in_place_jar(version, other_scala) is None
    assert not cache.exists(), "a jar built in place must not trigger a build"

    # A packaged jar for the line comes first (a wheel's, built from these very sources).
    _fake_prebuilt(packaged_root, jarbuild.sources_digest())
    line = jarbuild.line_for(version)
    assert line is not None
    assert build.jar_path() == packaged_root / line.jar_name

    # Edited sources: the jar built in place no longer fits.
    _edit_sources(tmp_path, monkeypatch)
    assert build.in_place_jar(version, scala) is None


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
