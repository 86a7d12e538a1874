# vllmctl: the two commands a new machine needs are `make demo` and `make test`.
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: install lint typecheck unit test demo demo-down bench clean

install:
	$(PYTHON) -m pip install -q -e '.[dev,lab,hub]'

lint:
	$(PYTHON) -m ruff check vllmctl tests benchmarks
	$(PYTHON) -m ruff format --check vllmctl tests benchmarks

typecheck:
	$(PYTHON) -m mypy

# Unit tests only: no root, no containers, seconds.
unit:
	$(PYTHON) -m pytest -q -m "not lab and not engine" $(PYTEST_ARGS)

# The whole suite: lint, types, unit tests, then the lab and real-engine tests (skipped with a reason when not root).
test: lint typecheck
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)

demo:
	bash scripts/demo.sh

demo-down:
	vllmctl lab down --name demo

bench:
	$(PYTHON) benchmarks/planner_accuracy.py
	$(PYTHON) benchmarks/planner_speed.py

clean:
	rm -rf .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist *.egg-info
