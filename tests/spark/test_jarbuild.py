"""The wheel-build side of the shim's jars: fetching a Spark line's compile jars, and the
errors when that or the JDK is missing (the build itself runs in `make setup` and
test_wheel.py)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from committer.spark import jarbuild

pytestmark = pytest.mark.spark

NAMES = ["spark-core_2.13-9.9.9.jar", "scala-library-2.13.1.jar", "hadoop-client-api-3.4.1.jar",
         "spark-mllib_2.13-9.9.9.jar", "zstd-jni-1.5.jar"]
WANTED = ["hadoop-client-api-3.4.1.jar", "scala-library-2.13.1.jar", "spark-core_2.13-9.9.9.jar"]


def _sdist(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name in [*NAMES, "nested/spark-core_2.13-0.jar"]:
            data = name.encode()
            info = tarfile.TarInfo(f"pyspark-9.9.9/deps/jars/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_only_the_compile_jars_are_taken_from_an_sdist_or_a_wheel(tmp_path: Path) -> None:
    sdist = tmp_path / "pyspark-9.9.9.tar.gz"
    _sdist(sdist)
    out = tmp_path / "from-sdist"
    out.mkdir()
    assert jarbuild._unpack_jars(sdist, out) == len(WANTED)
    assert sorted(p.name for p in out.iterdir()) == WANTED
    assert (out / "spark-core_2.13-9.9.9.jar").read_bytes() == b"spark-core_2.13-9.9.9.jar"

    wheel = tmp_path / "pyspark-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        for name in NAMES:
            whl.writestr(f"pyspark/jars/{name}", name)
    out = tmp_path / "from-wheel"
    out.mkdir()
    assert jarbuild._unpack_jars(wheel, out) == len(WANTED)
    assert sorted(p.name for p in out.iterdir()) == WANTED


def test_a_fetched_classpath_is_reused_and_a_failed_fetch_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No package index at all: pip cannot fetch anything.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-links"))
    with pytest.raises(jarbuild.JavacError, match=r"could not fetch pyspark 9\.9\.9.*pip download"):
        jarbuild.downloaded_classpath("9.9.9", tmp_path / "cache")
    assert not (tmp_path / "cache" / "pyspark-9.9.9" / ".complete").exists()

    done = tmp_path / "cache" / "pyspark-9.9.8"
    done.mkdir(parents=True)
    (done / ".complete").write_text("9.9.8")
    assert jarbuild.downloaded_classpath("9.9.8", tmp_path / "cache") == done


def test_building_the_wheel_without_a_jdk_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jarbuild, "find_javac", lambda: None)
    with pytest.raises(jarbuild.JavacError, match=r"JDK 17\+ \(javac on PATH or in JAVA_HOME\)"):
        jarbuild.build_prebuilt(tmp_path / "out", tmp_path / "cache")
    assert not (tmp_path / "out" / jarbuild.INDEX_NAME).exists()


def test_spark_lines_cover_35_and_every_4x() -> None:
    by_version = {v: jarbuild.line_for(v) for v in ("3.5.0", "3.5.9", "4.0.0", "4.2.1", "4.3.0",
                                                     "3.4.4", "5.0.0")}
    assert {v: (line.name if line else None) for v, line in by_version.items()} == {
        "3.5.0": "3.5", "3.5.9": "3.5", "4.0.0": "4", "4.2.1": "4", "4.3.0": "4",
        "3.4.4": None, "5.0.0": None,
    }
