"""The GPU health gate on real lab hosts (HGX profile, 8 H100 on NVSwitches): one host logged a reset-class
Xid since boot, one has MIG on a GPU its model uses; both are refused before their engine starts, with the
evidence, while the healthy third host deploys and serves. The engine is the lab's vLLM stand-in (no Ray:
a single-node engine), so no real vLLM is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.lab.testing import LabFleet, LabHostInfo, start_fleet, stop_fleet

pytestmark = pytest.mark.lab

UNIT = "vllmctl-tiny-0.service"
XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=lab, GPU has fallen off the bus."
SET_MIG = (
    "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); d['gpus'][0]['mig_mode']='Enabled'; "
    "json.dump(d, open(p, 'w'))"
)


@dataclass
class Gate:
    fleet: LabFleet
    inventory: Path
    state: Path

    def vllmctl(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250", "XDG_STATE_HOME": str(self.state)}
        argv = [sys.executable, "-m", "vllmctl", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def sh(self, host: LabHostInfo, command: str) -> str:
        result = self.fleet.ssh(host, command, timeout=60)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    name = f"pt{os.getpid()}-gate"
    work = tmp_path_factory.mktemp("gpugate")
    model_dir = Path(f"/var/tmp/vllmctl-gate-{os.getpid()}/tiny")
    try:
        fleet = start_fleet(name, 3, work / "lab.yml", gpus="8xH100-80GB")
        version, _ = ensure_standin_wheel(fleet.directory / "wheels")
        shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
        doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
        engine = {"name": "vllm", "package": PACKAGE, "version": version, "index_url": fleet.index_url}
        doc["defaults"]["engine"] = engine
        hosts = [h.name for h in fleet.hosts]
        # the stand-in starts only with the Ray backend; without a Ray cluster in its env it serves alone
        args = {"distributed_executor_backend": "ray"}
        doc["models"] = {
            "tiny": {"source": str(model_dir), "hosts": hosts, "port": 8000, "engine_args": args}
        }
        inventory = work / "gate.yml"
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        xid_host, mig_host, _ = fleet.hosts
        found = Gate(fleet, inventory, work)
        found.sh(xid_host, f"logger -t kernel '{XID_79}'")  # what the kernel logs, in this boot's journal
        found.sh(mig_host, f'sudo python3 -c "{SET_MIG}"')
        yield found
    finally:
        stop_fleet(name)
        shutil.rmtree(model_dir.parent, ignore_errors=True)


def test_facts_show_the_hgx_profile_and_each_hosts_verdict(gate: Gate) -> None:
    xid_host, mig_host, good = gate.fleet.hosts
    shown = gate.vllmctl("facts", str(gate.inventory), "--json")
    assert shown.returncode == 0, shown.stderr
    facts = {name: found["facts"]["gpu_health"] for name, found in json.loads(shown.stdout).items()}
    healthy = facts[good.name]
    assert healthy["nvswitch"] == [f"/dev/nvidia-nvswitch{i}" for i in range(4)]
    assert {(g["fabric_state"], g["persistence_mode"]) for g in healthy["smi"]["gpus"]} == {
        ("Completed", "Enabled")
    }
    assert healthy["xid"] == [] and healthy["smi"]["driver_version"] == "580.95.05"
    assert [x["xid"] for x in facts[xid_host.name]["xid"]] == [79]
    assert facts[mig_host.name]["smi"]["gpus"][0]["mig_mode"] == "Enabled"
    table = gate.vllmctl("facts", str(gate.inventory)).stdout
    assert "healthy: 8 GPUs, fabric Completed" in table
    assert "refused: xid: NVRM: Xid 79" in table and "refused: mig: GPU 0" in table


def test_refused_hosts_never_start_their_engine_while_the_healthy_one_serves(gate: Gate) -> None:
    xid_host, mig_host, good = gate.fleet.hosts
    applied = gate.vllmctl("apply", str(gate.inventory), "--json", "--health-timeout", "300")
    assert applied.returncode != 0
    doc = json.loads(applied.stdout)
    for host, evidence in ((xid_host, "Xid 79 (GPU has fallen off the bus)"), (mig_host, "MIG mode Enabled")):
        result = doc["hosts"][host.name]
        assert result["status"] == "failed", result
        (step,) = [s for s in result["steps"] if s["op"] == "gpu_health"]
        assert step["status"] == "failed" and evidence in json.dumps(step), step
        assert not [s for s in result["steps"] if s["phase"] == "services"]
        state = gate.fleet.ssh(host, f"systemctl is-active {UNIT}").stdout.strip()
        assert state != "active"
    healthy = doc["hosts"][good.name]
    assert healthy["status"] == "ok", json.dumps(healthy, indent=1)[-5000:] + applied.stderr[-3000:]
    (step,) = [s for s in doc["hosts"][good.name]["steps"] if s["op"] == "gpu_health"]
    assert step["status"] == "ok" and "healthy: 8 GPUs, fabric Completed" in step["noop"]
    models = httpx.get(f"http://{good.address}:8000/v1/models", timeout=30, trust_env=False)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny"
