"""The wheel as a user gets it: built from a clean checkout, installed into a fresh environment
beside pyspark 3.5, it commits a PySpark write on a driver with a JRE only (no javac on PATH or
in JAVA_HOME) and an empty jar cache: the jar it runs is the one the wheel carries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.spark.helpers import assert_ours

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SPARK35 = os.environ.get("SPARK35_VERSION", "3.5.7")


def _run(cmd: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, (cmd, done.stdout[-3000:], done.stderr[-5000:])
    return done  # type: ignore[no-any-return]


def _clean_checkout(dest: Path) -> None:
    """The tracked files only: nothing built (no jar, no class, no C module) comes along."""
    listed = _run(["git", "-C", str(REPO), "ls-files", "-z"], 60).stdout.split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


def _jre_only_path(tmp: Path) -> tuple[str, Path]:
    """A PATH with every command of this one but javac, and a JAVA_HOME holding only java."""
    java = shutil.which("java")
    assert java is not None, "the driver needs a java"
    java_home = tmp / "jre"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").symlink_to(Path(java).resolve())
    tools = tmp / "path"
    tools.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not directory or not Path(directory).is_dir():
            continue
        for entry in Path(directory).iterdir():
            link = tools / entry.name
            if entry.name != "javac" and not link.exists() and not link.is_symlink():
                link.symlink_to(entry)
    return os.pathsep.join([str(java_home / "bin"), str(tools)]), java_home


def test_wheel_on_spark35_commits_on_a_jre_only_driver(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    _clean_checkout(checkout)
    assert not list(checkout.rglob("*.jar"))
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist),
          str(checkout)], 900)
    [wheel] = dist.glob("spark_manifest_committer-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        jars = sorted(n for n in archive.namelist() if n.endswith(".jar"))
    assert jars == ["committer/spark/jars/committer-shim-spark3.5_2.12.jar",
                    "committer/spark/jars/committer-shim-spark4_2.13.jar"]

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], 300)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel), f"pyspark=={SPARK35}"],
         900)

    path, java_home = _jre_only_path(tmp_path)
    cache = tmp_path / "empty cache"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_MANIFEST_COMMITTER", "PYSPARK", "SPARK_HOME"))}
    env.update(PATH=path, JAVA_HOME=str(java_home), SPARK_MANIFEST_COMMITTER_CACHE=str(cache),
               PYTHONPATH="")
    probe = _run([str(python), "-c", "from committer.spark.jarbuild import find_javac; "
                  "print(find_javac())"], 60, env=env, cwd=tmp_path)
    assert probe.stdout.strip() == "None", "the driver must have no javac"

    dest = tmp_path / "table ü"
    done = _run([str(python), str(Path(__file__).parent / "wheel_driver.py"), str(dest)], 600,
                env=env, cwd=tmp_path)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["pyspark"].startswith("3.5.")
    assert Path(result["committer_module"]).is_relative_to(venv)
    assert Path(result["jar"]).is_relative_to(venv)
    assert Path(result["jar"]).name == "committer-shim-spark3.5_2.12.jar"
    assert result["rows"] == 60
    assert not cache.exists() or not any(cache.iterdir()), "nothing may be built at run time"
    assert_ours(dest)
