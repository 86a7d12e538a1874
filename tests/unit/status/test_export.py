"""`vllmctl export prometheus`: exact file_sd JSON and scrape_configs for small inventories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vllmctl import cli
from vllmctl.commands.export import recording_rules, scrape_config, service_discovery
from vllmctl.inventory import load_inventory
from vllmctl.tasks.desired import ModelPlan, Replica

INVENTORY = """\
vllmctl: 1
defaults:
  engine: {name: vllm, version: "0.11.0"}
hosts:
  gpu-01: {address: 10.0.0.11, gpus: {model: H100-80GB, count: 2}}
  gpu-02: {address: "fd00::12", gpus: {model: H100-80GB, count: 2}}
  a100-01:
    address: a100-01.dc1.example.com
    gpus: {model: A100-80GB, count: 4}
    engine: {name: sglang, version: "0.5.3"}
groups:
  h100: [gpu-01, gpu-02]
models:
  llama-8b:
    source: meta-llama/Llama-3.1-8B-Instruct
    hosts: h100
    port: 8000
  qwen-32b:
    source: Qwen/Qwen2.5-32B-Instruct
    hosts: a100-01
    port: 30000
"""

EXPECTED = [
    {
        "targets": ["10.0.0.11:8000"],
        "labels": {"job": "vllmctl", "model": "llama-8b", "host": "gpu-01", "engine": "vllm"},
    },
    {
        "targets": ["[fd00::12]:8000"],
        "labels": {"job": "vllmctl", "model": "llama-8b", "host": "gpu-02", "engine": "vllm"},
    },
    {
        "targets": ["a100-01.dc1.example.com:30000"],
        "labels": {"job": "vllmctl", "model": "qwen-32b", "host": "a100-01", "engine": "sglang"},
    },
]


# The CLI exports what apply deploys: the planner puts an 8B model on each of two H100s as two replicas,
# and SGLang runs its data-parallel workers behind one port.
CLI_EXPECTED = [
    {**EXPECTED[0], "targets": ["10.0.0.11:8000", "10.0.0.11:8001"]},
    {**EXPECTED[1], "targets": ["[fd00::12]:8000", "[fd00::12]:8001"]},
    EXPECTED[2],
]


@pytest.fixture
def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yml"
    path.write_text(INVENTORY)
    return path


def test_one_group_per_host_and_model(inventory_file: Path) -> None:
    assert service_discovery(load_inventory(inventory_file)) == EXPECTED


def test_data_parallel_replicas_are_listed_at_port_plus_i(inventory_file: Path) -> None:
    two = ModelPlan({"tensor_parallel_size": 1}, (Replica(0, 8000, (0,)), Replica(1, 8001, (1,))))
    groups = service_discovery(load_inventory(inventory_file), {"gpu-01": {"llama-8b": two}})
    assert groups[0]["targets"] == ["10.0.0.11:8000", "10.0.0.11:8001"]
    assert groups[1:] == EXPECTED[1:]


def test_cli_prints_the_json(inventory_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", "prometheus", str(inventory_file)]) == 0
    assert json.loads(capsys.readouterr().out) == CLI_EXPECTED


def test_cli_writes_the_file_and_says_so(
    inventory_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "sd" / "vllmctl.json"
    target.parent.mkdir()
    target.write_text("[]")  # replaced, not appended to
    assert cli.main(["export", "prometheus", str(inventory_file), "--output", str(target)]) == 0
    assert json.loads(target.read_text()) == CLI_EXPECTED
    assert [p.name for p in target.parent.iterdir()] == ["vllmctl.json"]  # no temporary left behind
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"wrote 5 targets in 3 groups to {target}" in captured.err


def test_scrape_config_points_at_the_file(inventory_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "export",
        "prometheus",
        str(inventory_file),
        "--format",
        "scrape-config",
        "--sd-file",
        "/srv/sd.json",
    ]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == (
        "scrape_configs:\n"
        "- job_name: vllmctl\n"
        "  metrics_path: /metrics\n"
        "  scrape_interval: 15s\n"
        "  file_sd_configs:\n"
        "  - files:\n"
        "    - /srv/sd.json\n"
    )


def test_scrape_config_default_path_is_valid_yaml() -> None:
    parsed = yaml.safe_load(scrape_config("/etc/prometheus/file_sd/vllmctl.json"))
    job = parsed["scrape_configs"][0]
    assert job["file_sd_configs"] == [{"files": ["/etc/prometheus/file_sd/vllmctl.json"]}]


def test_cli_writes_the_prefix_cache_rules(
    inventory_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "vllmctl.rules.yml"
    argv = ["export", "prometheus", str(inventory_file), "--format", "rules", "--output", str(target)]
    assert cli.main(argv) == 0
    assert target.read_text() == recording_rules()
    assert f"wrote the recording rules to {target}" in capsys.readouterr().err


def test_unwritable_output_is_an_input_error(
    inventory_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["export", "prometheus", str(inventory_file), "--output", "/nonexistent/dir/x.json"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot write /nonexistent/dir/x.json" in err
    assert "hint:" in err
    assert "Traceback" not in err


def test_a_broken_inventory_is_reported_not_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("vllmctl: 1\nhosts: {}\nmodels:\n  m: {source: x/y, hosts: nowhere}\n")
    assert cli.main(["export", "prometheus", str(broken)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "broken.yml" in captured.err


def test_a_multi_node_model_is_one_target_on_its_head_labelled_with_the_group(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    path.write_text(
        INVENTORY.replace("groups:\n", "groups:\n  big: {hosts: [gpu-02, gpu-01], multi_node: true, "
        "cluster_interface: eth1}\n").replace("models:\n", "models:\n  llama-405b: "
        "{source: meta-llama/Llama-3.1-405B-Instruct, hosts: big, port: 8100}\n")
    )  # fmt: skip
    groups = service_discovery(load_inventory(path))
    labels = {"job": "vllmctl", "model": "llama-405b", "host": "gpu-02", "engine": "vllm", "group": "big"}
    assert groups[0] == {"targets": ["[fd00::12]:8100"], "labels": labels}
    assert groups[1:] == EXPECTED


def test_the_gateways_prometheus_exporter_is_a_target_when_enabled(inventory_file: Path) -> None:
    gateway = "gateway:\n  hosts: a100-01\n  models: {llama-8b: {port: 9100}}\n  metrics_port: 8405\n"
    inventory_file.write_text(INVENTORY + gateway)
    groups = service_discovery(load_inventory(inventory_file))
    assert groups[:3] == EXPECTED
    labels = {"job": "vllmctl", "host": "a100-01", "component": "gateway"}
    assert groups[3:] == [{"targets": ["a100-01.dc1.example.com:8405"], "labels": labels}]
    inventory_file.write_text(INVENTORY + gateway.replace("  metrics_port: 8405\n", ""))
    assert service_discovery(load_inventory(inventory_file)) == EXPECTED


def test_each_hosts_dcgm_exporter_is_a_target_when_enabled(inventory_file: Path) -> None:
    enabled = INVENTORY.replace("  gpu-02: {", "  gpu-02: {driver: {dcgm_exporter: true}, ")
    assert enabled != INVENTORY
    inventory_file.write_text(enabled)
    groups = service_discovery(load_inventory(inventory_file))
    assert groups[:3] == EXPECTED
    labels = {"job": "vllmctl", "host": "gpu-02", "component": "dcgm-exporter"}
    assert groups[3:] == [{"targets": ["[fd00::12]:9400"], "labels": labels}]
