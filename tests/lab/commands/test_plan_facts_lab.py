"""`vllmctl plan --gather-facts` on real lab hosts: GPUs reported by each host win over declarations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vllmctl import cli
from vllmctl.lab.testing import LabFleet

pytestmark = pytest.mark.lab


def test_gathered_gpus_replace_declared_ones(
    lab_fleet: LabFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(lab_fleet.inventory.read_text())
    # the GPU build of vLLM: the lab's CPU build sizes its own memory and gets no GPU plan to compare
    data["defaults"]["engine"] = {"name": "vllm", "version": "0.11.0"}
    first, second = list(data["hosts"])[:2]
    for host in (first, second):
        data["hosts"][host]["gpus"] = {"model": "L4", "count": 1}  # deliberately wrong declarations
    data["models"] = {
        "qwen3-8b": {"source": "Qwen/Qwen3-8B", "hosts": [first, second], "max_model_len": 8192}
    }
    inventory = tmp_path / "lab-plan.yml"
    inventory.write_text(yaml.safe_dump(data))

    assert cli.main(["plan", str(inventory), "--gather-facts", "--offline", "--json"]) == 0
    entries = {e["host"]: e for e in json.loads(capsys.readouterr().out)["entries"]}
    # the lab fleet's second host has 2xL40S, the others 8xH100-80GB (tests/conftest.py)
    assert entries[first]["gpu_source"] == "facts"
    assert entries[first]["plan"]["gpu"] == "H100-80GB"
    assert entries[first]["plan"]["gpu_count"] == 8
    assert entries[second]["plan"]["gpu"] == "L40S"
    assert entries[second]["plan"]["gpu_count"] == 2

    assert cli.main(["plan", str(inventory), "--offline", "--json"]) == 0
    declared = {e["host"]: e for e in json.loads(capsys.readouterr().out)["entries"]}
    assert declared[first]["gpu_source"] == "declared"
    assert declared[first]["plan"]["gpu"] == "L4"


SET_USED = (
    "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); d['gpus'][0]['memory_used_mib']={}; "
    "json.dump(d, open(p, 'w'))"
)


def test_gpu_memory_a_foreign_process_holds_refuses_the_plan_and_vllmctls_own_does_not(
    lab_fleet: LabFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#36: the same 70,000 MiB held on GPU 0, by a process of a `vllmctl-*.service` unit and then by one
    outside them (the lab's nvidia-smi lists both as compute apps): only the foreign one refuses the plan."""
    data = yaml.safe_load(lab_fleet.inventory.read_text())
    data["defaults"]["engine"] = {"name": "vllm", "version": "0.11.0"}
    host = lab_fleet.hosts[0]
    data["models"] = {"qwen3-8b": {"source": "Qwen/Qwen3-8B", "hosts": [host.name], "max_model_len": 8192}}
    inventory = tmp_path / "lab-held.yml"
    inventory.write_text(yaml.safe_dump(data))

    def sh(command: str) -> str:
        done = lab_fleet.ssh(host, command)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        return done.stdout.strip()

    def hold(unit: str) -> None:
        sh(f"sudo systemd-run --quiet --unit {unit} sleep 600")
        pid = sh(f"systemctl show -p MainPID --value {unit}.service")
        sh(f"echo '{pid} 0 70000' | sudo tee /run/vllmctl-lab/compute-apps >/dev/null")

    def plan() -> tuple[int, dict[str, object]]:
        code = cli.main(["plan", str(inventory), "--gather-facts", "--offline", "--json"])
        (entry,) = json.loads(capsys.readouterr().out)["entries"]
        return code, entry

    sh('sudo mkdir -p /run/vllmctl-lab && sudo python3 -c "' + SET_USED.format(70000) + '"')
    try:
        hold("vllmctl-lab-held")
        code, entry = plan()
        assert code == 0 and entry["plan"] is not None, entry  # its own engine: about to be replaced
        sh("sudo systemctl stop vllmctl-lab-held.service")
        hold("someone-elses-job")
        code, entry = plan()
        assert code != 0 and entry["plan"] is None, entry
        assert "reduce GPU memory used by other processes" in str(entry["error"]), entry
    finally:
        lab_fleet.ssh(host, "sudo systemctl stop vllmctl-lab-held.service someone-elses-job.service")
        lab_fleet.ssh(host, "sudo rm -f /run/vllmctl-lab/compute-apps")
        sh('sudo python3 -c "' + SET_USED.format(0) + '"')
