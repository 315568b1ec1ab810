"""Only the optional C extension lives here; everything else is in pyproject.toml."""

import sys

from setuptools import Extension, setup

# The local-disk rename and rmdir loops without the GIL (committer/store/_native.c). Optional:
# a machine without a compiler installs fine and uses the ctypes loop instead.
native = Extension("committer.store._native", ["committer/store/_native.c"], optional=True,
                   extra_compile_args=["-O2"])
setup(ext_modules=[native] if sys.platform.startswith("linux") else [])
