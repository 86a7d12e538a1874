"""`vllmctl plan`: every (host, model) pair planned from the inventory, infeasible ones fail with numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllmctl import cli

REPO = Path(__file__).resolve().parents[3]


def _plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = cli.main(["plan", *argv, "--json", "--offline"])
    return code, json.loads(capsys.readouterr().out)


def test_mixed_fleet_plans_every_host_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _plan_json(capsys, str(REPO / "inventories/mixed-fleet.yml"))
    assert code == 0
    entries = out["entries"]
    assert isinstance(entries, list)
    pairs = sorted((e["host"], e["model"]) for e in entries)
    assert pairs == [
        ("a100-01", "qwen-32b"),
        ("a100-02", "qwen-32b"),
        ("h100-01", "llama-70b"),
        ("h100-02", "llama-70b"),
        ("l40s-01", "qwen-7b-chat"),
        ("l40s-02", "qwen-7b-chat"),
        ("l40s-03", "qwen-7b-chat"),
    ]
    llama = next(e for e in entries if e["model"] == "llama-70b")
    assert llama["plan"]["engine_args"]["tensor_parallel_size"] == 8  # explicit wins
    assert llama["plan"]["memory"]["fits"] is True
    qwen = next(e for e in entries if e["host"] == "l40s-01")
    # 4 L40S, TP 1 given explicitly: four data-parallel replicas on distinct GPUs and ports
    replicas = qwen["plan"]["replicas"]
    assert [r["gpu_indices"] for r in replicas] == [[0], [1], [2], [3]]
    assert [r["port"] for r in replicas] == [8001, 8002, 8003, 8004]


def test_limit_keeps_only_named_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _plan_json(capsys, str(REPO / "inventories/mixed-fleet.yml"), "--limit", "a100")
    assert code == 0
    assert {e["host"] for e in out["entries"]} == {"a100-01", "a100-02"}  # type: ignore[union-attr]


def test_a_model_that_cannot_fit_fails_with_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    inventory = REPO / "tests/fixtures/inventories/70b-on-one-l4.yml"
    assert cli.main(["plan", str(inventory), "--offline"]) == 1
    err = capsys.readouterr().err
    assert "l4-01 / llama-70b:" in err
    assert "GiB" in err
    assert "hint:" in err


REFUSED_TP = """vllmctl: 1
defaults:
  engine: {name: vllm, version: "0.11.0"}
hosts:
  gpu-01: {address: 10.0.0.11, gpus: {model: H100-80GB, count: 8}}
models:
  llama:
    source: meta-llama/Llama-3.1-8B-Instruct
    hosts: gpu-01
    max_model_len: 8192
    engine_args:
      tensor_parallel_size: 3
"""


def test_plan_refuses_a_flag_vllm_refuses_at_its_inventory_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = tmp_path / "tp3.yml"
    inventory.write_text(REFUSED_TP)
    assert cli.main(["plan", str(inventory), "--offline"]) == 2
    err = capsys.readouterr().err
    assert f"{inventory}:12:7: models.llama.engine_args.tensor_parallel_size:" in err
    assert "Total number of attention heads (32) must be divisible by tensor parallel size (3)." in err
    assert "valid tensor_parallel_size on 8 GPUs: 1, 2, 4, 8" in err
    code, out = _plan_json(capsys, str(inventory))
    assert code == 2
    [problem] = out["problems"]  # type: ignore[misc]
    assert (problem["line"], problem["field"]) == (12, "models.llama.engine_args.tensor_parallel_size")


def test_apply_refuses_it_before_touching_a_host(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    inventory = tmp_path / "tp3.yml"  # 10.0.0.11 is never contacted: the refusal comes first
    known = tmp_path / "known_hosts"
    known.write_text("")
    inventory.write_text(REFUSED_TP.replace("defaults:\n", f"defaults:\n  ssh: {{known_hosts: {known}}}\n"))
    assert cli.main(["apply", str(inventory), "--check", "--offline", "--yes"]) == 2
    err = capsys.readouterr().err
    assert "tensor_parallel_size: meta-llama/Llama-3.1-8B-Instruct: vLLM refuses to start" in err


def test_offline_plan_names_the_swap_space_rule_it_could_not_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # vLLM before 0.18 refuses swap_space x TP above 70 % of host memory; offline, host memory is unknown
    inventory = tmp_path / "swap.yml"
    inventory.write_text(
        REFUSED_TP.replace("tensor_parallel_size: 3", "tensor_parallel_size: 8\n      swap_space: 400")
    )
    code, out = _plan_json(capsys, str(inventory))
    assert code == 0
    [entry] = out["entries"]  # type: ignore[misc]
    [warning] = [w for w in entry["plan"]["warnings"] if "swap-space-within-host-memory" in w]
    assert "could not be checked: host memory unknown" in warning
    assert cli.main(["plan", str(inventory), "--offline"]) == 0
    assert "swap-space-within-host-memory could not be checked" in capsys.readouterr().err


def test_plan_shows_each_hosts_kernel_modules_and_refuses_a_flavour_the_gpu_cannot_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = tmp_path / "b200.yml"
    inventory.write_text(
        "vllmctl: 1\nhosts:\n"
        "  b1: {address: 10.0.0.1, gpus: {model: B200, count: 8}, driver: {branch: '580'}}\n"
        "  h1: {address: 10.0.0.2, gpus: {model: H100-80GB, count: 8}, driver: {branch: '550'}}\n"
    )
    code, out = _plan_json(capsys, str(inventory))
    assert code == 0
    drivers = {d["host"]: d for d in out["drivers"]}  # type: ignore[union-attr]
    assert drivers["b1"]["modules"] == "open" and drivers["b1"]["ubuntu_package"] == "nvidia-driver-580-open"
    assert "B200 (Blackwell) is supported only by the open kernel modules" in drivers["b1"]["why"]
    assert (
        drivers["h1"]["modules"] == "proprietary" and drivers["h1"]["ubuntu_package"] == "nvidia-driver-550"
    )
    assert cli.main(["plan", str(inventory), "--offline"]) == 0
    assert "b1: driver 580, nvidia-driver-580-open on Ubuntu: B200 (Blackwell)" in capsys.readouterr().out
    inventory.write_text(inventory.read_text().replace("branch: '580'}", "branch: '580', flavor: server}"))
    assert cli.main(["plan", str(inventory), "--offline"]) == 2
    err = capsys.readouterr().err
    assert "b1: driver flavor 'server' installs the proprietary kernel modules, but B200 (Blackwell)" in err
    assert "hint: set driver.flavor to 'server-open'" in err


def test_plan_refuses_a_pinned_driver_too_old_for_the_engines_cuda(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = tmp_path / "old-driver.yml"
    inventory.write_text(
        "vllmctl: 1\nhosts:\n"
        "  h1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 1}, driver: {branch: '575'},"
        " engine: {name: vllm, version: '0.20.0'}}\n"
        "models:\n  tiny: {source: Qwen/Qwen2.5-0.5B-Instruct, hosts: [h1]}\n"
    )
    assert cli.main(["plan", str(inventory), "--offline"]) == 2
    err = capsys.readouterr().err
    assert "h1: vllm 0.20.0 is built for CUDA 13.0 (vllmctl's table" in err
    assert "which needs driver >= 580; the host's is 575" in err and "raise driver.branch to '580'" in err
    assert "offline, and https://pypi.org/simple was never read for it" in err  # the fallback is named
    inventory.write_text(inventory.read_text().replace("'0.20.0'", "'0.11.0'"))
    assert cli.main(["plan", str(inventory), "--offline"]) == 0
