"""Running the real ``manifest-committer`` console script, and golden JSON files.

Every test goes through the installed entry point (``.venv/bin/manifest-committer``) in a
subprocess, as a user's shell would. JSON output is compared with ``tests/cli/golden/<name>.json``
after normalising what legitimately changes between runs: the temporary directory (raw and
URI-escaped), times, host names, etags (local etags contain inode numbers) and measured
durations. ``UPDATE_GOLDEN=1 pytest tests/cli`` rewrites the golden files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from manifest_schema.uris import location_to_uri

SCRIPT = Path(sys.executable).with_name("manifest-committer")
GOLDEN = Path(__file__).with_name("golden")
REPO = Path(__file__).resolve().parents[2]
HADOOP = REPO / "tests" / "data" / "hadoop"

# Values that differ on every run: replaced by "<volatile>" wherever these keys appear.
VOLATILE_KEYS = frozenset({
    "date", "timestamp", "hostname", "last_modified", "age_seconds", "first_manifest_at",
    "last_manifest_at", "duration_ms", "owner", "etag", "e", "manifest_bytes", "created", "pid",
    "host",
})
# Inside IOStatistics, measured durations differ on every run; counts do not.
TIMED_PARTS = ("minimums", "maximums")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> Result:
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, check=False)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _normalise(value: Any, subs: list[tuple[str, str]], key: str = "") -> Any:
    if key in VOLATILE_KEYS and value is not None:
        return "<volatile>"
    if key == "stages_ms" and isinstance(value, dict):
        return dict.fromkeys(sorted(value), "<volatile>")
    if key in TIMED_PARTS and isinstance(value, dict):
        return dict.fromkeys(sorted(value), "<volatile>")
    if key == "meanstatistics" and isinstance(value, dict):
        return {k: {"samples": v.get("samples"), "sum": "<volatile>"} for k, v in value.items()}
    if key == "filenames" and isinstance(value, list):
        # job commit loads manifests in parallel: _SUCCESS lists files in completion order
        return sorted(_normalise(v, subs) for v in value)
    if isinstance(value, dict):
        return {k: _normalise(v, subs, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, subs, key) for v in value]
    if isinstance(value, str):
        for old, new in subs:
            value = value.replace(old, new)
        return value
    return value





def normalise(doc: Any, tmp: Path | None) -> Any:
    subs: list[tuple[str, str]] = []
    if tmp is not None:
        real = str(tmp)
        subs = [(location_to_uri(real), "file:<TMP>"), (real, "<TMP>")]
    # the checkout's own path (fixtures are read from it) differs from clone to clone
    subs += [(location_to_uri(str(REPO)), "file:<REPO>"), (str(REPO), "<REPO>")]
    return _normalise(doc, subs)


def check_golden(name: str, doc: Any, tmp: Path | None) -> None:
    got = normalise(doc, tmp)
    path = GOLDEN / f"{name}.json"
    text = json.dumps(got, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"golden file {path} is missing (UPDATE_GOLDEN=1 writes it)")
    assert got == json.loads(path.read_text()), f"output differs from {path}"


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root``, files with their size and modification time: "changes
    nothing". Directory times are left out: the engine may write and remove its own journal
    in a job attempt directory while refusing a commit, which leaves no file changed."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (-1, -1)
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    # A space and a '#' in every test's root: paths that need escaping are the normal case.
    root = tmp_path / "cli root #1"
    root.mkdir()
    return root
