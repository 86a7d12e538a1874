"""Inventories the dashboard and rules tests build from."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory

# Two vLLM releases either side of the renames, an SGLang model, a gateway with its exporter, DCGM Exporter
# on the H100s, SLOs on one model only.
FLEET = """\
vllmctl: 1
defaults:
  engine: {name: vllm, version: "0.32.0"}
hosts:
  gpu-01:
    address: 10.0.0.11
    gpus: {model: H100-80GB, count: 8}
    driver: {branch: "570", dcgm_exporter: true}
  gpu-02:
    address: 10.0.0.12
    gpus: {model: H100-80GB, count: 8}
    driver: {branch: "570", dcgm_exporter: true}
  old-01:
    address: 10.0.0.21
    gpus: {model: A100-80GB, count: 4}
    engine: {name: vllm, version: "0.9.0"}
  sg-01:
    address: 10.0.0.31
    gpus: {model: A100-80GB, count: 4}
    engine: {name: sglang, version: "0.5.3"}
gateway:
  hosts: [gpu-01]
  models: {llama-8b: {port: 9000}, old-model: {port: 9001}}
  metrics_port: 8405
  drain_timeout_s: 300
models:
  llama-8b:
    source: meta-llama/Llama-3.1-8B-Instruct
    hosts: [gpu-01, gpu-02]
    port: 8000
    min_available: 2
    slo: {ttft_p99_ms: 1500, max_error_rate: 0.02}
  old-model:
    source: meta-llama/Llama-3.1-8B-Instruct
    hosts: [old-01]
    port: 8000
  qwen-sg:
    source: Qwen/Qwen2.5-7B-Instruct
    hosts: [sg-01]
    port: 30000
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Inventory:
    path = tmp_path / "fleet.yml"
    path.write_text(FLEET)
    return load_inventory(path)


@pytest.fixture
def fleet_file(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yml"
    path.write_text(FLEET)
    return path
