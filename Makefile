# Two commands set everything up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,operator,spark
# Test processes (pytest-xdist). Most of the suite's time is spent waiting on real
# processes (heartbeats, session timeouts, fsyncs), not computing, so one more worker than
# this machine's 2 cores overlaps that waiting. Tests that share a module- or
# package-scoped fixture stay on one worker (tests/sharing.py).
WORKERS ?= 3
PYTEST := $(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS)
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n1)
# The images the chart runs by default (its appVersion is the project's version), and
# the Spark pipeline's, which `make e2e` runs on the test cluster too.
IMAGES := localhost/epochlog-broker:$(VERSION) localhost/epochlog-operator:$(VERSION)
E2E_IMAGES := $(IMAGES) localhost/epochlog-pipeline:$(VERSION)

.PHONY: venv interop-jars lock test lint typecheck unit docs demo bench soak sim clean images e2e cluster cluster-down

venv:
	@scripts/bootstrap.sh $(EXTRAS)

# The jars of the Java clients the interop tests run (Apache Kafka's client and tools,
# Spark's own Kafka source), fetched with Maven from Maven Central into
# ~/.cache/epochlog-interop (tests/interop/jars.py); quick and offline once there.
interop-jars: venv
	@scripts/interop-jars.sh

# Writes the locks that scripts/bootstrap.sh installs from, keeping every pinned version
# that still satisfies pyproject.toml; `make lock UPGRADE=--upgrade` moves to the newest.
# Uses the uv of an existing .venv and does not depend on `venv`: a pyproject.toml
# that the current lock no longer satisfies must not stop the lock from being rewritten.
LOCK := $(BIN)/uv pip compile -q pyproject.toml requirements/tools.in --generate-hashes \
	--python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--custom-compile-command "make lock" $(UPGRADE)
# The images' locks (scripts/images.sh) hold only what runs in them, at the versions of
# dev.txt (a constraint), so that the images run what the tests ran.
lock:
	$(LOCK) --extra dev --extra operator --extra docs -o requirements/dev.txt
	$(LOCK) --extra dev --extra operator --extra docs --extra spark -o requirements/spark.txt
	$(LOCK) -c requirements/dev.txt -o requirements/broker-image.txt
	$(LOCK) --extra operator -c requirements/dev.txt -o requirements/image.txt
	$(LOCK) --extra spark -c requirements/spark.txt -o requirements/pipeline-image.txt

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

unit: venv interop-jars
	$(PYTEST) -m "not scenario"

# The documentation site (mkdocs.yml, docs/) into build/site. --strict fails the build on
# any warning, and mkdocs.yml's `validation:` makes every internal link, anchor and nav
# entry that does not resolve a warning. Links to other sites are not checked: CI reaches
# no network but the package registries. Not --quiet: it hides the warnings strict counts.
# NO_MKDOCS_2_WARNING silences the theme's notice.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: venv
	$(MKDOCS) build --strict --site-dir build/site

# The whole-system scenarios (marked `scenario`: the demo, the nemesis, Spark across
# failover, most simulator seeds) run in `make e2e`.
test: venv interop-jars
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(MKDOCS) build --strict --site-dir build/site
	$(PYTEST) -m "not scenario"

demo: venv
	$(BIN)/epochlog demo

# interop-jars: besides its jars, it installs the Java runtime and Maven that side_by_side
# and kafka_perf_tools need to fetch and run Kafka's own jars (benchmarks/kafka_cluster.py).
# Each benchmark also writes its figures to build/bench/<name>.json (benchmarks/results.py);
# the last step draws the docs' plots from them into docs/assets/bench/ (benchmarks/plots.py).
bench: venv interop-jars
	$(BIN)/python -m benchmarks.log_bench
	$(BIN)/python -m benchmarks.retention_bench
	$(BIN)/python -m benchmarks.broker_bench
	$(BIN)/python -m benchmarks.operator_bench
	$(BIN)/python -m benchmarks.failover_bench
	$(BIN)/python -m benchmarks.rolling_restart_bench
	$(BIN)/python -m benchmarks.reassign_bench
	$(BIN)/python -m benchmarks.spark_bench
	$(BIN)/python -m benchmarks.round_trip
	$(BIN)/python -m benchmarks.scale_bench --partitions 10,100,300
	$(BIN)/python -m benchmarks.side_by_side
	$(BIN)/python -m benchmarks.kafka_perf_tools
	$(BIN)/python -m benchmarks.plots

soak: venv
	HYPOTHESIS_PROFILE=soak $(PYTEST) --timeout 3600
	$(BIN)/epochlog --log-level critical sim --seeds 20000
	EPOCHLOG_NEMESIS_SECONDS=600 $(BIN)/pytest -q -p no:cacheprovider --timeout 3600 \
		tests/e2e/test_nemesis.py

# The broker and operator images, built with buildah (scripts/images.sh says how).
images:
	@scripts/images.sh

# A single-node Kubernetes built here from pinned versions (cluster/up.sh says what runs
# and where); prints its kubeconfig's path. `make cluster-down` stops it, keeping its data.
cluster:
	@cluster/up.sh

cluster-down:
	@cluster/down.sh

# The tests that exercise the Kubernetes API, run against a real kube-apiserver (the test
# cluster's binaries; tests/kube_apiserver.py) instead of the emulator.
KUBE_API_TESTS := tests/devcluster/test_fidelity.py tests/devcluster/test_apiserver.py \
	tests/devcluster/test_watch.py tests/devcluster/test_kubectl.py \
	tests/devcluster/test_users_api.py tests/operator_e2e

# Slow scenarios on real images and whole clusters: the embedded scenarios; the tests of
# the Kubernetes API against a real API server; the chart's scenarios on the test cluster
# (built and started when it is not running), with the images of this tree loaded (the
# pipeline's too).
e2e: venv images
	EPOCHLOG_IMAGES=pipeline scripts/images.sh
	$(PYTEST) -m scenario tests
	EPOCHLOG_TEST_APISERVER=real EPOCHLOG_KUBE_BIN=$$(cluster/build.sh) \
		$(BIN)/pytest -q -p no:cacheprovider -m "not emulator_only" $(KUBE_API_TESTS)
	kubeconfig=$$(cluster/up.sh) && cluster/load-images.sh $(E2E_IMAGES) && \
		EPOCHLOG_E2E_KUBECONFIG=$$kubeconfig EPOCHLOG_E2E_KUBECTL=$$(cluster/build.sh)/kubectl \
		$(BIN)/pytest -q -p no:cacheprovider e2e

sim: venv
	$(BIN)/epochlog --log-level critical sim --seeds $(or $(SEEDS),1000)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
