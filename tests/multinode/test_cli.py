"""`vllmctl plan` and `vllmctl cluster` on the example multi-node inventory (no hosts needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    assert vllmctl("validate", EXAMPLE).returncode == 0


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
