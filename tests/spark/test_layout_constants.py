"""The shim's layout and format constants equal the Python side's (``committer/layout.py`` and
friends), read from the compiled classes: what runs, not what a source file seems to say."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from committer import layout
from committer.config import KEYS, CommitterConfig
from committer.layout import CUSTOM_LOCATIONS_DIR
from committer.spark import build
from manifest_schema import DirStatus
from manifest_schema.task_manifest import TASK_MANIFEST_TYPE

pytestmark = pytest.mark.spark

CLASSES = ("manifestcommitter.spark.ManifestCommitProtocol",
           "manifestcommitter.spark.TaskManifestWriter")
_CONSTANT = re.compile(r"^\s*(?:private |public |protected )?static final "
                       r"(java\.lang\.String|int|long) (\w+) = (.*);$")


def javap() -> str:
    javac = build.find_javac()
    found = (str(Path(javac).with_name("javap")) if javac else None) or shutil.which("javap")
    if found is None or not Path(found).exists():
        pytest.fail("javap not found beside javac: the JDK the build needs has it")
    return found


def compiled_constants() -> dict[str, str | int]:
    """``Class.FIELD`` -> value of every String and integer constant of the shim's classes."""
    out = subprocess.run([javap(), "-constants", "-p", "-cp", str(build.jar_path()), *CLASSES],
                         capture_output=True, text=True, check=True).stdout
    constants: dict[str, str | int] = {}
    current = ""
    for line in out.splitlines():
        if " class " in line and "{" in line:
            current = line.split(" class ", 1)[1].split()[0].rsplit(".", 1)[-1]
            continue
        m = _CONSTANT.match(line)
        if m:
            kind, name, value = m.groups()
            if kind == "java.lang.String":
                constants[f"{current}.{name}"] = value[1:-1].encode().decode("unicode_escape")
            else:
                constants[f"{current}.{name}"] = int(value.rstrip("lL"))
    return constants


def python_side() -> dict[str, str | int]:
    save_key = next(k.name for k in KEYS if k.attr == "manifest_save_attempts")
    threads_key = next(k.name for k in KEYS if k.attr == "io_threads")
    return {
        "ManifestCommitProtocol.TEMPORARY_DIR": layout.TEMPORARY_DIR,
        "ManifestCommitProtocol.JOB_DIR_PREFIX": layout.JOB_DIR_PREFIX,
        "ManifestCommitProtocol.TASKS_DIR": layout.TASKS_DIR,
        "ManifestCommitProtocol.MANIFESTS_DIR": layout.MANIFESTS_DIR,
        "ManifestCommitProtocol.MANIFEST_SUFFIX": layout.MANIFEST_SUFFIX,
        # The temporary manifest is named MANIFEST_SUFFIX + TMP_SUFFIX (checked below).
        "ManifestCommitProtocol.TMP_SUFFIX":
            layout.TEMP_MANIFEST_SUFFIX.removeprefix(layout.MANIFEST_SUFFIX),
        "ManifestCommitProtocol.JOB_MARKER": layout.JOB_MARKER,
        "ManifestCommitProtocol.ABSOLUTE_SUBDIR": CUSTOM_LOCATIONS_DIR,
        "ManifestCommitProtocol.JOB_ATTEMPT": layout.JobLayout("/d", "j").attempt,
        "TaskManifestWriter.MANIFEST_TYPE": TASK_MANIFEST_TYPE,
        "TaskManifestWriter.SAVE_ATTEMPTS_KEY": save_key,
        "TaskManifestWriter.SAVE_ATTEMPTS_DEFAULT": CommitterConfig().manifest_save_attempts,
        "TaskManifestWriter.IO_THREADS_KEY": threads_key,
        "TaskManifestWriter.IO_THREADS_DEFAULT": CommitterConfig().io_threads,
        "TaskManifestWriter.STATUS_UNKNOWN": int(DirStatus.UNKNOWN),
    }


# Constants that are the shim's own business, with no Python counterpart.
NOT_SHARED = {"ManifestCommitProtocol.serialVersionUID",
              # Hadoop's name of a filesystem capability, asked of the filesystem
              "TaskManifestWriter.ETAGS_PRESERVED_IN_RENAME"}


@pytest.mark.skipif(build.find_javac() is None, reason="needs a JDK")
def test_every_layout_constant_of_the_shim_equals_the_python_side() -> None:
    java = compiled_constants()
    python = python_side()
    assert "ManifestCommitProtocol.TEMPORARY_DIR" in java, "javap output not understood"
    unchecked = set(java) - set(python) - NOT_SHARED
    assert not unchecked, f"shim constants with no Python counterpart checked here: {unchecked}"
    assert {k: java.get(k) for k in python} == python
    assert layout.MANIFEST_SUFFIX + str(java["ManifestCommitProtocol.TMP_SUFFIX"]) == (
        layout.TEMP_MANIFEST_SUFFIX)
