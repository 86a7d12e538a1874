"""`vllmctl plan`, `vllmctl cluster` and `vllmctl status` on multi-node inventories (no hosts needed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "inventories" / "multi-node.yml")


def vllmctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "vllmctl", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_plan_shows_one_engine_over_two_of_the_three_hosts() -> None:
    result = vllmctl("plan", EXAMPLE, "--offline", "--json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)["entries"]
    roles = {}
    for entry in entries:
        reasons = {r["flag"]: r for r in entry["plan"]["reasons"]}
        roles[entry["host"]] = reasons["role"]["value"]
        args = entry["plan"]["engine_args"]
        assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (8, 2)
        assert args["distributed_executor_backend"] == "ray"
    assert roles == {"gpu-01": "head", "gpu-02": "worker", "gpu-03": "spare"}


def test_validate_accepts_the_example() -> None:
    assert vllmctl("validate", EXAMPLE, "--no-controller-checks").returncode == 0  # no keys on a test box


def test_cluster_refuses_a_model_that_is_not_multi_node(tmp_path: Path) -> None:
    inventory = tmp_path / "one.yml"
    inventory.write_text(
        "vllmctl: 1\nhosts:\n  a: {gpus: {model: H100-80GB, count: 8}}\n"
        "models:\n  small: {source: Qwen/Qwen3-8B, hosts: a}\n"
    )
    result = vllmctl("cluster", str(inventory), "small", "--offline")
    assert result.returncode == 2
    assert result.stderr == (
        "error: model 'small' is not multi-node\n  hint: serve it on a group with multi_node: true "
        "(see docs/multinode.md)\n"
    )


UNREACHABLE = """\
vllmctl: 1
defaults:
  ssh: {{user: ops, port: 1, known_hosts: {known}}}
  engine: {{name: vllm, version: "0.11.0"}}
  gpus: {{model: H100-80GB, count: 8}}
hosts:
  gpu-01: {{address: 127.0.0.1}}
  gpu-02: {{address: 127.0.0.2}}
  gpu-03: {{address: 127.0.0.3}}
groups:
  nodes: {{hosts: [gpu-01, gpu-02, gpu-03], multi_node: true, cluster_interface: eth1}}
models:
  llama-405b: {{source: meta-llama/Llama-3.1-405B, hosts: nodes, port: 1024, max_model_len: 8192}}
"""


def test_status_shows_the_group_as_one_entry_even_when_no_node_answers(tmp_path: Path) -> None:
    inventory = tmp_path / "down.yml"  # nothing listens on SSH port 1: no call gets through
    inventory.write_text(UNREACHABLE.format(known=tmp_path / "known_hosts"))
    result = vllmctl("status", str(inventory), "--json", "--limit", "gpu-02", "--interval", "0")
    assert result.returncode == 1, result.stderr
    [entry] = json.loads(result.stdout)["entries"]
    assert (entry["host"], entry["model"], entry["ok"]) == ("gpu-01", "llama-405b", False)
    group = entry["group"]
    assert group["ray_units"] == {"gpu-01": "unreachable", "gpu-02": "unreachable"}
    assert (group["formed"], group["engine"], group["ok"]) == (False, "unreachable", False)
    assert group["problems"][-1] == "ray status: 0 of 2 Ray nodes alive"
    table = vllmctl("status", str(inventory), "--limit", "gpu-03", "--interval", "0")
    assert table.returncode == 1
    _header, row = table.stdout.splitlines()  # one row: the group, not one per node
    assert re.split(r"\s{2,}", row.strip())[:4] == [
        "gpu-01 (group nodes)",
        "llama-405b",
        "1024",
        "unreachable, ray 0/2 active, not formed",
    ]
    shown = vllmctl("cluster", str(inventory), "llama-405b", "--status", "--offline")
    assert shown.returncode == 1
    assert "group nodes (head gpu-01): Ray units: gpu-01 unreachable, gpu-02 unreachable" in shown.stdout


def plain_list(tmp_path: Path) -> Path:
    """UNREACHABLE without its multi_node group: the 405B model on a plain list of two hosts."""
    inventory = tmp_path / "plain.yml"
    (tmp_path / "known_hosts").write_text("")  # apply checks the controller's files as validate does
    groups, models = UNREACHABLE.format(known=tmp_path / "known_hosts").split("models:\n")
    plain = models.replace("hosts: nodes,", "hosts: [gpu-01, gpu-02],")
    inventory.write_text(groups.split("groups:\n")[0] + "models:\n" + plain)
    return inventory


def test_a_model_that_needs_both_hosts_of_a_plain_list_is_one_group_for_apply_and_status(
    tmp_path: Path,
) -> None:
    inventory = str(plain_list(tmp_path))  # nothing listens on port 1: every SSH and HTTP call is refused
    applied = vllmctl("apply", inventory, "--check", "--offline", "--json")
    assert applied.returncode == 1, applied.stdout + applied.stderr
    group = json.loads(applied.stdout)["groups"]["llama-405b"]
    assert (group["group"], group["nodes"], group["status"]) == (
        "llama-405b",
        ["gpu-01", "gpu-02"],
        "not_started",
    )
    shown = vllmctl("status", inventory, "--json", "--interval", "0")
    [entry] = json.loads(shown.stdout)["entries"]  # one engine over both hosts: no per-host half engines
    assert (entry["host"], entry["model"], entry["group"]["group"]) == ("gpu-01", "llama-405b", "llama-405b")
