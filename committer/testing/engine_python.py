"""An interpreter to give the shim (``spark.manifest.committer.python``) that runs a module of
one's own as the engine: a test's intercepting engine, a benchmark's deferred one."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

__all__ = ["engine_python"]


def engine_python(directory: Path, module: str, *args: str) -> Path:
    """An executable in ``directory`` that runs ``python -m module args`` (the shim's own
    arguments, ``-m committer.spark.driver --serve``, are dropped)."""
    script = directory / "python.sh"
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", module, *args))
    script.write_text(f"#!/bin/sh\nexec {command}\n", encoding="utf-8")
    script.chmod(0o755)
    return script
