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
