"""Only the optional C extension lives here; everything else is in pyproject.toml."""

import sys

from setuptools import Extension, setup

# Both optional: a machine without a compiler installs fine and runs the same code in Python.
# The local-disk rename and rmdir loops without the GIL (committer/store/_native.c; Linux calls,
# else the ctypes loop).
native = Extension("committer.store._native", ["committer/store/_native.c"], optional=True,
                   extra_compile_args=["-O2"])
# The load stage's whole-manifest entry checks in one pass (committer/job/stages/_checks.c).
checks = Extension("committer.job.stages._checks", ["committer/job/stages/_checks.c"], optional=True,
                   extra_compile_args=["-O2"])
setup(ext_modules=[checks, native] if sys.platform.startswith("linux") else [checks])
