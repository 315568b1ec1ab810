"""Build steps pyproject.toml cannot express: the optional C extensions and the shim's jars."""

import importlib.util
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithJars(build_py):
    """A wheel also gets the JVM shim, one jar per Spark line, in the package (``spark/jars/``):
    a driver then needs a JRE only. Needs a JDK and fetches each line's first pyspark release
    through pip (see committer/spark/jarbuild.py).

    An editable install (``make setup``) compiles no jar here: it is built in an isolated
    environment before the virtual environment's pyspark is installed, so it could only compile
    against downloaded releases. ``make setup`` compiles one jar afterwards, in place, against
    the pyspark it installed (``python -m committer.spark.build --in-place``).
    """

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        spec = importlib.util.spec_from_file_location(
            "_manifest_committer_jarbuild", HERE / "committer" / "spark" / "jarbuild.py"
        )
        assert spec is not None and spec.loader is not None
        jarbuild = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = jarbuild  # dataclasses look their module up
        spec.loader.exec_module(jarbuild)
        output = Path(self.build_lib) / "committer" / "spark" / jarbuild.PREBUILT_DIR
        for jar in jarbuild.build_prebuilt(output):
            print(f"built {jar}")


# Both optional: a machine without a compiler installs fine and runs the same code in Python.
# Both are written to Python 3.10's limited API and built for the stable ABI (``*.abi3.so``), so
# one wheel per platform, tagged cp310-abi3, serves every CPython from 3.10 on.
LIMITED_API = [("Py_LIMITED_API", "0x030A0000")]
# The local-disk loops (rename, rmdir, stat, count) without the GIL
# (committer/store/local/_native.c; Linux calls, else the ctypes loop).
native = Extension("committer.store.local._native", ["committer/store/local/_native.c"],
                   optional=True, py_limited_api=True, define_macros=LIMITED_API,
                   extra_compile_args=["-O2"])
# The load stage's whole-manifest entry checks in one pass (committer/job/stages/_checks.c).
checks = Extension("committer.job.stages._checks", ["committer/job/stages/_checks.c"],
                   optional=True, py_limited_api=True, define_macros=LIMITED_API,
                   extra_compile_args=["-O2"])
setup(
    ext_modules=[checks, native] if sys.platform.startswith("linux") else [checks],
    cmdclass={"build_py": BuildPyWithJars},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
