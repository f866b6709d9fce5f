# Two commands set everything up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,operator

.PHONY: venv test lint typecheck unit demo bench soak sim clean

venv:
	@scripts/bootstrap.sh $(EXTRAS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest

test: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

demo: venv
	$(BIN)/epochlog demo

bench: venv
	$(BIN)/python -m benchmarks.log_bench
	$(BIN)/python -m benchmarks.broker_bench
	$(BIN)/python -m benchmarks.operator_bench
	$(BIN)/python -m benchmarks.failover_bench

soak: venv
	HYPOTHESIS_PROFILE=soak $(BIN)/pytest -q -p no:cacheprovider --timeout 3600
	$(BIN)/epochlog --log-level critical sim --seeds 20000
	EPOCHLOG_NEMESIS_SECONDS=600 $(BIN)/pytest -q -p no:cacheprovider tests/e2e/test_nemesis.py

sim: venv
	$(BIN)/epochlog --log-level critical sim --seeds $(or $(SEEDS),1000)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
