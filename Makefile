# spark-manifest-committer: one place for every developer and CI command.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
STAMP := $(VENV)/.installed

# The Spark each environment runs: the main one, and the second one the Spark 3.5 suite uses.
SPARK_VERSION ?= 4.3.0
SPARK35_VERSION ?= 3.5.7
# tests/spark/test_wheel.py installs the wheel beside this pyspark.
export SPARK35_VERSION
VENV35 ?= .venv-spark35
PYTHON35 := $(VENV35)/bin/python
STAMP35 := $(VENV35)/.installed
# Installing (editable) builds the C modules (setup.py), for the stable ABI: *.abi3.so.
BUILD_INPUTS := pyproject.toml setup.py committer/store/local/_native.c committer/job/stages/_checks.c
# A module built for one Python (*.cpython-311-*.so, as before the stable ABI) would be imported
# before the *.abi3.so beside it: removed before each build.
OLD_MODULES = rm -f committer/store/local/_native.cpython-*.so committer/job/stages/_checks.cpython-*.so
# Then each environment compiles the shim's jar in place, against the pyspark it installed:
# nothing is downloaded for it. (The editable install cannot: pip builds it in an isolated
# environment before pyspark is installed. A wheel build compiles a jar per Spark line.)
JAR_STAMP := $(VENV)/.jar-built
JAR_STAMP35 := $(VENV35)/.jar-built
JAR_INPUTS := committer/spark/build.py committer/spark/jarbuild.py \
	committer/spark/jvm/spark-lines.json \
	$(wildcard committer/spark/jvm/src/manifestcommitter/spark/*.java)

.PHONY: setup setup-python setup-spark35 jvm-artifacts jvm-artifacts-spark35 test test-core test-core-slow test-spark test-fuzz-scale test-fast test-loaded test-spark35 test-pythons test-pythons-ci test-crash-scale test-crash-cloud lint bench bench-emulators bench-spark \
	demo jar wheel clean

# pip byte-compiles what it installs one file at a time: half the time of an install from a warm
# cache here. compileall does it on every CPU and skips the packages' own tests, which nothing
# here imports. Like pip, it lets a file that does not compile be (hence `|| true`).
# $(call compile,PYTHON)
compile = $(1) -m compileall -qq -j 0 -x '/tests/' \
	"$$($(1) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true

# pyspark comes as a source archive (456 MB for 4.3.0) that pip builds into a wheel. Its jars are
# compressed already: the wheel stores them as they are (deflating them again took 17 s of CPU
# to save 8%). pyspark is installed first, alone, so that option reaches no other build.
STORED := --config-settings=--build-option=--compression=stored

# Create the virtual environment and install the project with everything tests need.
$(STAMP): $(BUILD_INPUTS)
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet --no-compile $(STORED) 'pyspark==$(SPARK_VERSION)'
	$(OLD_MODULES)
	$(PYTHON) -m pip install --quiet --no-compile -e '.[dev]' 'pyspark==$(SPARK_VERSION)'
	$(call compile,$(PYTHON))
	touch $(STAMP)

$(JAR_STAMP): $(STAMP) $(JAR_INPUTS)
	$(PYTHON) -m committer.spark.build --in-place
	touch $(JAR_STAMP)

# The same project and test tools beside pyspark 3.5 (Scala 2.12), in a second environment.
$(STAMP35): $(BUILD_INPUTS)
	test -x $(PYTHON35) || $(PY) -m venv $(VENV35)
	$(PYTHON35) -m pip install --quiet --upgrade pip
	$(PYTHON35) -m pip install --quiet --no-compile $(STORED) 'pyspark==$(SPARK35_VERSION)'
	$(OLD_MODULES)
	$(PYTHON35) -m pip install --quiet --no-compile -e '.[dev]' 'pyspark==$(SPARK35_VERSION)'
	$(call compile,$(PYTHON35))
	touch $(STAMP35)

$(JAR_STAMP35): $(STAMP35) $(JAR_INPUTS)
	$(PYTHON35) -m committer.spark.build --in-place
	touch $(JAR_STAMP35)

# The JVM jars the tests put beside pyspark's (Hadoop's cloud connectors, a MiniDFSCluster,
# spark-hadoop-cloud), pinned per Spark line with their SHA-256 in
# committer/testing/jvm_artifacts.py, fetched from Maven Central into
# ~/.cache/spark-manifest-committer/jars/ (checked each time, downloaded once per machine).
# `make test` needs them; the demo does not.
jvm-artifacts: $(STAMP)
	$(PYTHON) -m committer.testing.jvm_artifacts --line 4 >/dev/null

jvm-artifacts-spark35: $(STAMP35)
	$(PYTHON35) -m committer.testing.jvm_artifacts --line 3.5 >/dev/null

setup-spark35: $(STAMP35) $(JAR_STAMP35) jvm-artifacts-spark35

# Azurite (the Azure Blob emulator the tests and benchmarks start) comes from npm.
NPM_STAMP := node_modules/.installed
$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

# The Python side (the environment and its jar): all `make demo` needs.
setup-python: $(STAMP) $(JAR_STAMP)

setup: setup-python $(NPM_STAMP) jvm-artifacts

# The whole suite (what .ci/run calls), in five parts run three at a time, each part's wall time
# printed as it ends: the suite run as one part kept 0.69 of a CPU busy (1,036 s of CPU in
# 1,512 s; most of its time waits on JVMs, emulators, latencies and the processes it kills), so
# three share the two-core machine CI runs on. The
# environments, jars and the release wheel are made first, one after another (two installs
# would build the same C modules in place at once). A part that fails fails `make test`, after
# the other parts ran (-k: every failure of the run is reported).
# - test-core-slow, test-core: every test outside tests/spark, on this environment (Python 3.11,
#   pyspark 4.3): the slow ones (crash, fuzz and property tests at scale), then the others;
# - test-spark: tests/spark on Spark 4.3;
# - test-spark35: the Spark suite's share on Spark 3.5 (below);
# - test-pythons-ci: the release wheel on Python 3.10 and 3.12 (below).
# The 40,000-file SIGKILL test (tests/committer/job/test_crash_at_scale.py) runs this many
# kill points per variant in the suite, to keep the suite's time bounded; `make test-crash-scale`
# runs the hundred per variant its docs report.
SCALE_CRASH_POINTS ?= 8
# The connection fuzz at scale draws this many examples in the suite (`make test-fuzz-scale`:
# 480, about 13,000 answers).
FUZZ_SCALE_EXAMPLES ?= 160
# Longest first: `make -j` starts them in this order.
TEST_PARTS := test-core-slow test-core test-spark test-spark35 test-pythons-ci
# $(call timed,COMMAND): runs it, then prints the target's wall time and exit status
timed = start=$$(date +%s); $(1); status=$$?; \
	echo "== $@: exit $$status after $$(( $$(date +%s) - start )) s"; exit $$status
# (PARTS_READY: the parts' set-up is done; each part run alone makes its own.)
test: setup setup-spark35 wheel
	@$(call timed,$(MAKE) --no-print-directory -j3 -k --output-sync=target PARTS_READY=1 $(TEST_PARTS))

test-core: $(if $(PARTS_READY),,setup)
	@$(call timed,$(PYTHON) -m pytest -q -m "not slow" --ignore=tests/spark)

test-core-slow: $(if $(PARTS_READY),,setup)
	@$(call timed,SCALE_CRASH_POINTS=$(SCALE_CRASH_POINTS) FUZZ_SCALE_EXAMPLES=$(FUZZ_SCALE_EXAMPLES) \
		$(PYTHON) -m pytest -q -m slow --ignore=tests/spark)

test-fuzz-scale: setup
	$(PYTHON) -m pytest -q -s tests/committer/store/http/test_connection_fuzz.py -k at_scale

test-spark: $(if $(PARTS_READY),,setup)
	@$(call timed,$(PYTHON) -m pytest -q tests/spark)

test-crash-scale: setup
	SCALE_CRASH_POINTS=100 $(PYTHON) -m pytest -q -s tests/committer/job/test_crash_at_scale.py

# The SIGKILL test on the simulated account, every cloud path (Data Lake, flat Blob, GCS, and a
# GCS bucket with a hierarchical namespace whose task-owned partitions move by folder renames):
# `make test` runs 3 kill points of a 5,000-file commit per path; this, the hundred points of
# a 20,000-file commit per path that docs/failure-semantics.md reports (64 to 80 minutes on
# two CPUs, the paths side by side; CLOUD_CRASH_SERVICES picks paths, e.g.
# `make test-crash-cloud CLOUD_CRASH_SERVICES=gcs-hns`). Each run's figures: CLOUD_CRASH_JSON
# (one JSON line a run).
CLOUD_CRASH_POINTS ?= 100
CLOUD_CRASH_FILES ?= 20000
CLOUD_CRASH_JSON ?= benchmarks/results/crash-cloud.jsonl
CLOUD_CRASH_SERVICES ?= adls blob gcs gcs-hns
test-crash-cloud: setup
	mkdir -p $(dir $(CLOUD_CRASH_JSON)) && rm -f $(CLOUD_CRASH_JSON)
	pids=""; for service in $(CLOUD_CRASH_SERVICES); do \
		case $$service in gcs) select="gcs and not hns";; gcs-hns) select="hns";; \
			*) select=$$service;; esac; \
		CLOUD_CRASH_POINTS=$(CLOUD_CRASH_POINTS) CLOUD_CRASH_FILES=$(CLOUD_CRASH_FILES) \
		CLOUD_CRASH_JSON=$(CLOUD_CRASH_JSON) $(PYTHON) -m pytest -q -s \
			tests/committer/job/test_crash_cloud.py -k "$$select" & pids="$$pids $$!"; \
	done; status=0; for pid in $$pids; do wait $$pid || status=1; done; exit $$status

# The Spark suite's share that proves a Spark line works, on Spark 3.5: every write mode against
# Spark's own committer, the engine process, failed overwrites keeping the old data, task
# commit races, a driver killed mid-commit then resumed, the packaged jar's selection, a
# filesystem only the JVM opens committed by Hadoop's committer, Data Lake and GCS through
# Hadoop's own connectors (3.3.4's hadoop-azure, the GCS connector's Hadoop 3 line), a real
# HDFS (MiniDFSCluster) committed by Spark's usual committer.
SPARK35_TESTS := tests/spark/test_writes.py tests/spark/test_engine.py \
	tests/spark/test_overwrite_safety.py tests/spark/test_failures.py \
	tests/spark/test_task_commit.py tests/spark/test_driver_crash.py tests/spark/test_build.py \
	tests/spark/test_task_etags.py tests/spark/test_task_scan.py \
	tests/spark/test_jvm_only_filesystem.py \
	tests/spark/test_cloud_connectors.py tests/spark/test_hdfs.py
test-spark35: $(if $(PARTS_READY),,setup-spark35)
	@$(call timed,$(PYTHON35) -m pytest -q $(SPARK35_TESTS))

# A target (`make test` unless LOADED says another) beside LOAD_BURNERS CPU-bound processes for
# its whole run: the suite as CI's shared two-core machine often sees it. No test may fail here
# that passes on a quiet machine (e.g. `make test-loaded LOADED=test-spark35`).
LOADED ?= test
LOAD_BURNERS ?= 2
test-loaded: setup
	$(PYTHON) -m tests.under_load --burners $(LOAD_BURNERS) -- $(MAKE) --no-print-directory $(LOADED)

# Everything but the slow suites.
test-fast: setup
	$(PYTHON) -m pytest -q -m "not slow"

# ruff and mypy --strict at the oldest Python the package supports (pyproject.toml: 3.10), then
# at the newer ones the tests run on: what a later Python removed or changed shows there. ruff's
# second run leaves out its upgrade rules (UP), which at 3.12 ask for what 3.10 lacks.
LINT_DIRS := committer manifest_schema tests benchmarks
MYPY_ALSO := 3.12 3.13
lint: setup
	$(BIN)/ruff check $(LINT_DIRS)
	$(BIN)/ruff check --target-version py312 --ignore UP $(LINT_DIRS)
	$(BIN)/mypy
	for version in $(MYPY_ALSO); do $(BIN)/mypy --python-version $$version || exit 1; done

# Benchmarks: JSON results and a Markdown report under benchmarks/results/.
# bench: local-disk job commit vs the os ceiling, and peak memory at a million files.
bench: setup
	$(PYTHON) -m benchmarks

# Job commit on the Azurite and fake-gcs-server emulators (started and stopped by the harness).
bench-emulators: setup
	$(PYTHON) -m benchmarks.emulators

# A partitioned PySpark write through Spark's default committer, Hadoop's, and this one;
# then tiny writes through the default committer and both engine paths (fixed cost per job).
bench-spark: setup jar
	$(PYTHON) -m benchmarks.spark_write
	$(PYTHON) -m benchmarks small-writes

clean:
	rm -rf build dist committer/spark/jars *.egg-info .pytest_cache .mypy_cache .ruff_cache benchmarks/results
	rm -f $(JAR_STAMP) $(JAR_STAMP35)

# The release wheel, in dist/: one file for every CPython from 3.10 on (cp310-abi3) on Linux
# (manylinux), the package with its two C modules built for the stable ABI and one jar per Spark
# line, each compiled against the line's first release, which the build fetches through pip
# (pyspark 3.5.0 and 4.0.0, 751 MB; the jars compiled against are kept in
# ~/.cache/spark-manifest-committer/build/). Built by this checkout's environment (its pip, not
# the system Python's), then checked: abi3audit (the modules use Python 3.10's stable ABI and
# nothing else), auditwheel repair (they link nothing a manylinux platform lacks: it grafts no
# library and tags the wheel; it needs patchelf on PATH, from the environment), and the file's
# name and jars (tests/pythons.py --check).
RAW_WHEELS := build/raw-wheel
wheel: $(STAMP)
	rm -rf $(RAW_WHEELS) build/lib.* build/bdist.* build/temp.*
	rm -f dist/spark_manifest_committer-*.whl
	$(PYTHON) -m pip wheel --quiet --no-deps -w $(RAW_WHEELS) .
	$(BIN)/abi3audit --strict --summary $(RAW_WHEELS)/*.whl
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/auditwheel repair --wheel-dir dist $(RAW_WHEELS)/*.whl
	$(PYTHON) -m tests.pythons --check dist/spark_manifest_committer-*.whl

# The release wheel on each Python (tests/pythons.py): an environment per interpreter
# (.venv-pythons/), the same wheel file installed in each (nothing built), then the fast suite,
# a Spark 4 write through `configure` and through the --conf lines alone, and on the Pythons
# pyspark 3.5 runs on, the Spark write modes on pyspark 3.5. An interpreter missing fails.
PYTHONS ?= 3.10,3.11,3.12,3.13
test-pythons: wheel $(NPM_STAMP)
	$(PYTHON) -m tests.pythons --pythons $(PYTHONS) --wheel dist/spark_manifest_committer-*.whl
# CI's share (.ci/run): on 3.10 and 3.12, the same wheel, the core tests and one Spark write.
CI_PYTHONS ?= 3.10,3.12
# Its environments live outside the clone (PYTHONS_ENVS): a machine's next run reuses them
# (each is made again when what it must hold changed). `make test` builds the wheel first.
PYTHONS_ENVS ?= $(HOME)/.cache/spark-manifest-committer/venv-pythons
test-pythons-ci: $(if $(PARTS_READY),,wheel)
	@$(call timed,PYTHONS_ENVS=$(PYTHONS_ENVS) $(PYTHON) -m tests.pythons --suite core \
		--pythons $(CI_PYTHONS) --wheel dist/spark_manifest_committer-*.whl)

# The JVM shim jar for the installed pyspark (built in place by setup, else compiled and cached).
jar: setup-python
	$(PYTHON) -m committer.spark.build

# The README's main command: a real PySpark job writes through the committer, prints _SUCCESS.
demo: setup-python jar
	$(PYTHON) -m committer.spark.demo
