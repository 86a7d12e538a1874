# vllmctl: the two commands a new machine needs are `make demo` and `make test`.
PYTHON ?= python3
PYTEST_ARGS ?= --durations=60
# Molecule and Ansible live in their own venv, never in vllmctl's environment; made on first use.
MOLECULE_VENV ?= /var/cache/vllmctl/molecule-venv

.PHONY: install lint typecheck unit test test-rollouts demo-fresh molecule demo demo-down bench clean

install:
	$(PYTHON) -m pip install -q -e '.[dev,lab,hub,ansible]'

lint:
	$(PYTHON) -m ruff check vllmctl tests benchmarks
	$(PYTHON) -m ruff format --check vllmctl tests benchmarks

typecheck:
	$(PYTHON) -m mypy

# Unit tests only (tests/unit): no root, no containers, a few minutes.
unit:
	$(PYTHON) -m pytest -q tests/unit $(PYTEST_ARGS)

# The whole suite: lint, types, as root the README's `make demo` on a fresh fleet of its own (demo-fresh), unit
# tests, the lab and real-engine tests (skipped with a reason when not root), then, as root, the Molecule
# scenario (create, converge, idempotence, verify, destroy on lab hosts).
# Two pytest-xdist workers by default (CI has 2 cores): each lab module goes whole to one worker, the longest
# first, unit tests last (tests/conftest.py); each worker builds its own fleet and deployment. Three workers
# hold three deployments' engines (~3 GB each) besides the other lab engines: more than CI's 24 GiB.
# `WORKERS=0` runs one process.
# The rollouts under real faults (`rollout_faults`: engines slowed past 300 s, driver and stale-engine
# reboots, a killed run, two runs at once, rollback after an interrupted apply, waves and canaries) restart
# engines a host or two at a time, 10-22 minutes a module on 2 cores: with them CI's run passed its 90
# minutes, so they run apart, in `make test-rollouts`.
WORKERS ?= 2
test: lint typecheck
	if [ "$$(id -u)" = 0 ]; then $(MAKE) demo-fresh; else echo "demo-fresh: skipped (needs root)"; fi
	$(PYTHON) -m pytest -q $(PYTEST_ARGS) -n $(WORKERS) --dist loadgroup -m "not rollout_faults"
	if [ "$$(id -u)" = 0 ]; then $(MAKE) molecule; else echo "molecule: skipped (needs root)"; fi

test-rollouts:
	$(PYTHON) -m pytest -q $(PYTEST_ARGS) -n $(WORKERS) --dist loadgroup -m rollout_faults

molecule:
	test -x $(MOLECULE_VENV)/bin/molecule || { $(PYTHON) -m venv $(MOLECULE_VENV) && \
	  $(MOLECULE_VENV)/bin/pip install -q -r molecule/requirements.txt; }
	PATH=$(MOLECULE_VENV)/bin:$$PATH VLLMCTL=$$(command -v vllmctl) molecule test

demo:
	bash scripts/demo.sh

demo-down:
	vllmctl lab down --name $${DEMO_FLEET:-demo}

# The demo exactly as a new user runs it (scripts/demo.sh, its first apply bringing up the gateway), on lab
# hosts made for it and removed after, whatever the outcome; its time is printed.
demo-fresh:
	vllmctl lab down --name demo-fresh >/dev/null 2>&1 || true
	start=$$(date +%s); rc=0; DEMO_FLEET=demo-fresh bash scripts/demo.sh || rc=$$?; \
	  echo "make demo (fresh fleet): exit $$rc in $$(( $$(date +%s) - start )) s"; \
	  vllmctl lab down --name demo-fresh; exit $$rc

bench:
	$(PYTHON) benchmarks/planner_accuracy.py
	$(PYTHON) benchmarks/planner_speed.py

clean:
	rm -rf .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist *.egg-info
