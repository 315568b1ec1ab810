"""The release wheel on every Python the package supports (``make test-pythons``).

    python -m tests.pythons --wheel dist/X.whl [--pythons 3.10,3.11,3.12,3.13] [--suite fast]

For each Python: an environment of its own (``.venv-pythons/<version>``) made by that
interpreter, the ONE wheel file installed into it as it is (``--only-binary :all: --no-index
--no-deps``: nothing can be built, and the installed C modules must be the wheel's files, byte
for byte), then, from a copy of the tests beside the installed package (never the checkout's
sources):

- the suite: ``fast`` (everything but the slow suites) or ``core`` (the engine's own tests and
  both C modules against their fallbacks, what CI runs on the Pythons beside its own);
- a Spark 4 write through ``committer.spark.configure``, and one through the ``--conf`` lines
  alone (``tests/spark/wheel_driver.py``), each checked to be this committer's;
- where pyspark 3.5 runs on that Python (``SPARK35_PYTHONS``), the same in a second environment
  with pyspark 3.5: the Spark suite's write modes and a write through ``configure``.

An interpreter comes from ``$PYTHON_<major>_<minor>`` (e.g. ``PYTHON_3_10``), else pyenv's newest
``<version>.*``, else ``python<version>`` on PATH; a missing one fails the run, it is never
skipped. Exit status 0 only if every step passed on every Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The environments; CI keeps them outside its clone, so that a machine's next run reuses them.
ENVS = Path(os.environ.get("PYTHONS_ENVS") or REPO / ".venv-pythons")
TREES = REPO / "build" / "pythons"
SPARK_VERSION = os.environ.get("SPARK_VERSION", "4.3.0")
SPARK35_VERSION = os.environ.get("SPARK35_VERSION", "3.5.7")
# pyspark 3.5 runs on these: each runs the Spark suite's write modes on it
SPARK35_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# The Spark 4 a Python's environment runs: pyspark 4.3.0 requires Python 3.11+, so 3.10 gets
# the newest pyspark 4 that installs there (the same jar serves every 4.x).
SPARK4_FOR = {"3.10": os.environ.get("SPARK4_PY310_VERSION", "4.2.1")}
# The Spark of the `core` suite's environment: 3.10 beside Spark 3.5 (what Databricks 14.3 LTS
# runs, issue 47), so that CI's share runs each jar on a Python other than 3.11.
CORE_SPARK_FOR = {"3.10": SPARK35_VERSION}
C_MODULES = ("committer.store.local._native", "committer.job.stages._checks")
# pyspark is a source archive pip builds into a wheel (pure Python: nothing is compiled); its
# jars are compressed already, so the wheel stores them (as the Makefile does).
STORED = "--config-settings=--build-option=--compression=stored"
# `core` (CI's share, kept small): job commit end to end on local disk, the local-disk store on
# both builds of its loops (the C module and the fallback), the formats, the cloud stores' wire
# layer (imported whole)
CORE_TESTS = ("tests/manifest_schema", "tests/committer/job/test_job_commit.py",
              "tests/committer/store/test_local.py", "tests/committer/store/gcs")
# what each suite's environment installs beside the wheel and pyspark
SUITE_EXTRAS = {"fast": "dev", "core": "spark"}
CORE_TOOLS = ("pytest>=8", "pytest-timeout>=2.2", "hypothesis>=6.100", "jsonschema>=4.20")


@dataclass
class Outcome:
    python: str
    steps: list[tuple[str, bool, str]] = field(default_factory=list)
    passed: int = 0
    failed: int = 0

    def step(self, name: str, ok: bool, detail: str = "") -> bool:
        self.steps.append((name, ok, detail))
        print(f"[{self.python}] {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}",
              flush=True)
        return ok


def interpreter(version: str) -> Path:
    override = os.environ.get("PYTHON_" + version.replace(".", "_"))
    if override:
        return Path(override)
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True,
                          check=False).stdout.strip() if shutil.which("pyenv") else ""
    if root:
        found = sorted(Path(root, "versions").glob(f"{version}.*/bin/python"),
                       key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])
        found = [p for p in found if re.fullmatch(rf"{re.escape(version)}\.\d+", p.parts[-3])]
        if found:
            return found[-1]
    on_path = shutil.which(f"python{version}")
    if on_path:
        return Path(on_path)
    raise SystemExit(
        f"test-pythons: no Python {version}: set PYTHON_{version.replace('.', '_')} to its "
        f"interpreter, or install it (pyenv install {version}); it is not skipped")


def _run(cmd: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    try:
        done: subprocess.CompletedProcess[str] = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False,
            **kwargs)  # type: ignore[call-overload]
        return done
    except subprocess.TimeoutExpired as e:  # its output is bytes, whatever text= said
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        return subprocess.CompletedProcess(cmd, -9, out, f"timed out: {e}")


def _tail(done: subprocess.CompletedProcess[str], lines: int = 25) -> str:
    return "\n".join((done.stdout + done.stderr).strip().splitlines()[-lines:])


def _site_packages(python: Path) -> Path:
    out = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               60)
    return Path(out.stdout.strip())


def _stamped(requirement: str) -> str:
    """A requirement as the environment's stamp notes it: a wheel by its name and the
    requirements its metadata lists (not its path, which differs between clones)."""
    path = Path(requirement.partition("[")[0])
    if not path.name.endswith(".whl") or not path.is_file():
        return requirement
    with zipfile.ZipFile(path) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line for line in archive.read(metadata).decode().splitlines()
                    if line.startswith(("Requires-Dist:", "Requires-Python:"))]
    return json.dumps([path.name + requirement[len(str(path)):], requires])


def make_env(base: Path, env: Path, requirements: list[str], outcome: Outcome,
             pyspark: str) -> Path | None:
    """The environment with pyspark and the requirements (pip's wheels only), made again only
    when what it must hold changed. Returns its python."""
    python = env / "bin" / "python"
    wanted = json.dumps([str(base), pyspark, [_stamped(r) for r in requirements]])
    stamp = env / ".pythons-installed"
    if stamp.exists() and stamp.read_text() == wanted and python.exists():
        return python
    shutil.rmtree(env, ignore_errors=True)
    started = time.monotonic()
    steps = [[str(base), "-m", "venv", str(env)],
             [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
             [str(python), "-m", "pip", "install", "--quiet", "--no-compile", STORED, pyspark],
             # everything else from wheels only: nothing built, whatever the Python
             [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--only-binary",
              ":all:", *requirements]]
    for cmd in steps:
        done = _run(cmd, 1800)
        if done.returncode != 0:
            outcome.step(f"environment {env.name}", False, f"{' '.join(cmd[:6])}...\n"
                         + _tail(done))
            return None
    stamp.write_text(wanted)
    outcome.step(f"environment {env.name} made", True, f"{time.monotonic() - started:.0f} s")
    return python


def install_wheel(python: Path, wheel: Path, outcome: Outcome) -> bool:
    """The wheel file itself, as it is, and proof that nothing was built: pip may take no
    source and no index, and the C modules it put in place are the wheel's own files."""
    done = _run([str(python), "-m", "pip", "install", "--force-reinstall", "--no-deps",
                 "--no-index", "--only-binary", ":all:", "--no-compile", str(wheel)], 600,
                env={**os.environ, "CC": "false", "CXX": "false"})
    if not outcome.step(f"install {wheel.name}", done.returncode == 0, _tail(done, 5)
                        if done.returncode else ""):
        return False
    built = re.findall(r"(?i)building wheel|running build_ext|gcc ", done.stdout + done.stderr)
    with zipfile.ZipFile(wheel) as archive:
        members = {n: hashlib.sha256(archive.read(n)).hexdigest()
                   for n in archive.namelist() if n.endswith(".so")}
    probe = _run([str(python), "-c", "import importlib, json, sys; print(json.dumps("
                  "{m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))",
                  *C_MODULES], 60, cwd=tempfile.gettempdir())
    if not outcome.step("import the C modules", probe.returncode == 0, _tail(probe, 5)):
        return False
    files: dict[str, str] = json.loads(probe.stdout)
    site = _site_packages(python)
    same = all(
        Path(f).name.endswith(".abi3.so") and Path(f).is_relative_to(site)
        and members.get(Path(f).relative_to(site).as_posix())
        == hashlib.sha256(Path(f).read_bytes()).hexdigest()
        for f in files.values())
    others = sorted(str(p.relative_to(site)) for p in (site / "committer").rglob("*.so")
                    if p.relative_to(site).as_posix() not in members)
    detail = "; ".join(f"{m} -> {f}" for m, f in files.items())
    return outcome.step("the wheel's own abi3 modules, nothing built at install",
                        same and not others and not built and len(members) == len(C_MODULES),
                        detail + (f"; not from the wheel: {others}" if others else "")
                        + (f"; pip built: {built}" if built else ""))


def test_tree(python: Path, name: str) -> Path:
    """The checkout's tracked files but the package's sources, which are links to the
    environment's installed copy: tests that run ``python -m committer...`` from the tree, or
    read the package's files by path, get the installed wheel."""
    tree = TREES / name
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                            text=True, check=True).stdout.split("\0")
    for rel in filter(None, listed):
        if rel.split("/")[0] in ("committer", "manifest_schema"):
            continue
        source = REPO / rel
        if source.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / rel)
    site = _site_packages(python)
    for package in ("committer", "manifest_schema"):
        (tree / package).symlink_to(site / package)
    if (REPO / "node_modules").is_dir():  # Azurite, for the emulator tests
        (tree / "node_modules").symlink_to(REPO / "node_modules")
    return tree


def run_pytest(python: Path, tree: Path, args: list[str], label: str,
               outcome: Outcome) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    # the installed package finds no node_modules beside it: Azurite is the checkout's
    azurite = REPO / "node_modules" / ".bin" / "azurite-blob"
    if azurite.exists():
        env.setdefault("AZURITE_BLOB_BIN", str(azurite))
    # a bound for a hang: the fast suite took over an hour beside four others on a busy machine
    done = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], 4 * 3600,
                cwd=tree, env=env)
    last = [line for line in done.stdout.splitlines()
            if re.search(r"\d+ (passed|failed|errors?)\b", line)]
    summary = last[-1].strip("= ") if last else "no pytest summary"
    passed = sum(int(n) for n in re.findall(r"(\d+) passed", summary))
    failed = sum(int(n) for n in re.findall(r"(\d+) (?:failed|error)", summary))
    outcome.passed += passed
    outcome.failed += failed
    ok = done.returncode == 0 and passed > 0 and failed == 0
    return outcome.step(f"{label}: {summary}", ok, "" if ok else _tail(done, 40))


def spark_write(python: Path, conf_only: bool, want_pyspark: str, outcome: Outcome) -> bool:
    from tests.spark.helpers import assert_ours

    label = f"pyspark {want_pyspark} write through " + ("--conf alone" if conf_only
                                                         else "configure")
    with tempfile.TemporaryDirectory(prefix="pythons-write-") as tmp:
        dest = Path(tmp) / "table ü"
        env = {k: v for k, v in os.environ.items()
               if k != "PYTHONPATH" and not k.startswith(("SPARK_MANIFEST_COMMITTER",
                                                          "PYSPARK", "SPARK_HOME"))}
        env["SPARK_MANIFEST_COMMITTER_CACHE"] = str(Path(tmp) / "jar cache")
        args = [str(python), str(REPO / "tests" / "spark" / "wheel_driver.py")]
        done = _run([*args, *(["--conf-only"] if conf_only else []), str(dest)], 900, cwd=tmp,
                    env=env)
        if done.returncode != 0:
            return outcome.step(label, False, _tail(done, 30))
        result = json.loads(done.stdout.strip().splitlines()[-1])
        site = _site_packages(python)
        try:
            assert result["pyspark"] == want_pyspark, result
            assert result["rows"] == 60, result
            assert Path(result["committer_module"]).is_relative_to(site), result
            assert result["protocol"] == "manifestcommitter.spark.ManifestCommitProtocol"
            assert_ours(dest)
            cache = Path(tmp) / "jar cache"
            assert not cache.exists() or not any(cache.iterdir()), "a jar was compiled"
        except AssertionError as e:
            return outcome.step(label, False, repr(e))
        return outcome.step(label, True, f"{result['rows']} rows, Python {result['python']}, "
                            f"jar {Path(result['jar']).name}")


def one_python(version: str, wheel: Path, suite: str) -> Outcome:
    outcome = Outcome(version)
    base = interpreter(version)
    started = time.monotonic()
    extras = SUITE_EXTRAS[suite]
    requirements = [f"{wheel}[{extras}]", *(CORE_TOOLS if suite == "core" else ())]
    spark = (CORE_SPARK_FOR if suite == "core" else SPARK4_FOR).get(version, SPARK_VERSION)
    env_name = version if suite == "fast" else f"{version}-core"
    python = make_env(base, ENVS / env_name, requirements, outcome, f"pyspark=={spark}")
    if python is None or not install_wheel(python, wheel, outcome):
        return outcome
    tree = test_tree(python, env_name)
    selection = ["-m", "not slow"] if suite == "fast" else ["-m", "not slow", *CORE_TESTS]
    run_pytest(python, tree, selection, f"{suite} suite, pyspark {spark}", outcome)
    spark_write(python, False, spark, outcome)
    if suite == "fast":
        spark_write(python, True, spark, outcome)
    if suite == "fast" and version in SPARK35_PYTHONS:
        # the write modes need Spark and pytest only: pyspark 3.5's Connect extra (in `dev`)
        # wants numpy < 2, which has no wheel for 3.13, and pip then gave up resolving
        python35 = make_env(base, ENVS / f"{version}-spark35",
                            [f"{wheel}[spark]", *CORE_TOOLS], outcome,
                            f"pyspark=={SPARK35_VERSION}")
        if python35 is not None and install_wheel(python35, wheel, outcome):
            tree35 = test_tree(python35, f"{version}-spark35")
            run_pytest(python35, tree35, ["tests/spark/test_writes.py"],
                       f"Spark write modes, pyspark {SPARK35_VERSION}", outcome)
            spark_write(python35, False, SPARK35_VERSION, outcome)
    outcome.step(f"done in {time.monotonic() - started:.0f} s", True)
    return outcome


JARS = ["committer/spark/jars/committer-shim-spark3.5_2.12.jar",
        "committer/spark/jars/committer-shim-spark4_2.13.jar"]
SO_FILES = ["committer/job/stages/_checks.abi3.so", "committer/store/local/_native.abi3.so"]


def check_wheel(wheel: Path) -> None:
    """The release wheel is one file for every CPython from 3.10 (cp310-abi3), for manylinux,
    with both C modules built for the stable ABI and a jar per Spark line."""
    if not re.search(r"-cp310-abi3-manylinux_\d+_\d+_\w+\.whl$", wheel.name):
        raise SystemExit(f"{wheel.name} is not a cp310-abi3 manylinux wheel")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    found = {"jars": sorted(n for n in names if n.endswith(".jar")),
             "C modules": sorted(n for n in names if ".so" in Path(n).suffixes)}
    for what, want in (("jars", JARS), ("C modules", SO_FILES)):
        if found[what] != want:
            raise SystemExit(f"{wheel.name}: {what} {found[what]}, not {want}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pythons", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path)
    parser.add_argument("--check", type=Path, metavar="WHEEL",
                        help="only check the wheel's name and contents")
    parser.add_argument("--pythons", default="3.10,3.11,3.12,3.13")
    parser.add_argument("--suite", choices=sorted(SUITE_EXTRAS), default="fast")
    args = parser.parse_args(argv)
    if args.check is not None:
        check_wheel(args.check)
        print(f"{args.check}: cp310-abi3 manylinux; {', '.join(SO_FILES + JARS)}")
        return 0
    if args.wheel is None:
        parser.error("--wheel is needed")
    wheel = args.wheel.resolve()
    check_wheel(wheel)
    versions = [v.strip() for v in args.pythons.split(",") if v.strip()]
    for version in versions:  # every interpreter is there, or nothing runs
        print(f"Python {version}: {interpreter(version)}", flush=True)
    print(f"wheel: {wheel.name} (sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()})",
          flush=True)
    outcomes = [one_python(v, wheel, args.suite) for v in versions]
    print()
    for o in outcomes:
        bad = [name for name, ok, _ in o.steps if not ok]
        print(f"Python {o.python}: {o.passed} passed, {o.failed} failed"
              + (f"; failed steps: {bad}" if bad else "; every step passed"))
    # the closing line: the tests pytest ran, and each other step (install, write) as one
    steps = [ok for o in outcomes for name, ok, _ in o.steps
             if not (name.startswith("done in") or (ok and name.startswith("environment ")))]
    pytest_steps = sum(1 for o in outcomes for name, _, _ in o.steps if " suite" in name
                       or name.startswith("Spark write modes"))
    print(f"test-pythons: {sum(o.passed for o in outcomes) + sum(steps) - pytest_steps} passed, "
          f"{sum(o.failed for o in outcomes) + steps.count(False)} failed")
    return 0 if all(steps) else 1


if __name__ == "__main__":
    sys.exit(main())
