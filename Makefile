# spark-manifest-committer: one place for every developer and CI command.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast lint bench bench-emulators bench-spark demo jar clean

# Create the virtual environment and install the project with everything tests need.
$(STAMP): pyproject.toml setup.py committer/store/_native.c committer/job/_checks.c
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Azurite (the Azure Blob emulator the tests and benchmarks start) comes from npm.
NPM_STAMP := node_modules/.installed
$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

setup: $(STAMP) $(NPM_STAMP)

# The whole suite (what .ci/run calls).
test: setup
	$(PYTHON) -m pytest -q

# Everything but the slow suites.
test-fast: setup
	$(PYTHON) -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check committer manifest_schema tests benchmarks
	$(BIN)/mypy

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
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache benchmarks/results

# The JVM shim jar, compiled from source against the installed pyspark (cached); prints its path.
jar: setup
	$(PYTHON) -m committer.spark.build

# The README's main command: a real PySpark job writes through the committer, prints _SUCCESS.
demo: setup jar
	$(PYTHON) -m committer.spark.demo
