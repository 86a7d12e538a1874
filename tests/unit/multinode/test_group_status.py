"""A multi-node group seen as one: the script each node runs, its answers read into a ClusterState, when the
group is ok, and the one entry `vllmctl status` shows for it (row text, findings, JSON, endpoints)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from ray_texts import ray_status

from vllmctl.bench.endpoints import endpoints_for
from vllmctl.errors import TransportError, VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.plan import ClusterPlan, plan_cluster
from vllmctl.status.group import cluster_state, group_models, node_state_script, with_groups
from vllmctl.status.model import ClusterState, ModelStatus
from vllmctl.status.view import findings, status_json, status_row

Load = Callable[[str], Inventory]
INVENTORY = """\
groups:
  big: {hosts: [gpu-01, gpu-02, gpu-03], multi_node: true, cluster_interface: eth1}
models:
  llama-405b: {source: meta-llama/Llama-3.1-405B, hosts: big, max_model_len: 8192, port: 8100}
"""
SINGLE = """\
  small: {source: Qwen/Qwen3-8B, hosts: gpu-03, port: 8200}
"""
WHOLE = ray_status(nodes=2, gpus=16.0)
HALF = ray_status(nodes=1, gpus=8.0)


def planned(load: Load, extra: str = "") -> tuple[Inventory, ClusterPlan]:
    inv = load(INVENTORY + extra)
    model = inv.models["llama-405b"]
    assert model.cluster is not None
    return inv, plan_cluster(inv, model, model.cluster)  # PP 2: gpu-01 head, gpu-02 worker, gpu-03 spare


def head_answer(ray: str = "active", engine: str = "inactive", status: str = WHOLE) -> str:
    return f"ray_unit={ray}\nengine_unit={engine}\n--- ray status ---\n{status}"


def test_the_head_also_reports_its_engine_and_ray_status_workers_only_their_unit(load: Load) -> None:
    inv, plan = planned(load)
    engine = inv.hosts["gpu-01"].engine
    assert plan.hosts == ("gpu-01", "gpu-02")
    assert node_state_script(plan, engine, "gpu-02", "10.0.0.11") == (
        "echo ray_unit=$(systemctl is-active vllmctl-ray-big.service)\n"
        "echo release=$(readlink /var/lib/vllmctl/groups/big/current || echo -)\n"
        "echo known_good=$(readlink /var/lib/vllmctl/groups/big/known-good || echo -)\n"
    )
    head = node_state_script(plan, engine, "gpu-01", "10.0.0.11").splitlines()
    assert head[3] == "echo engine_unit=$(systemctl is-active vllmctl-llama-405b-0.service)"
    assert head[4].startswith("ip=$(ip -o -4 addr show dev eth1 ")
    assert head[5:] == [
        '[ "$ip" = - ] && ip=10.0.0.11',
        "echo '--- ray status ---'",
        'timeout 20 /opt/vllmctl/venvs/vllm-0.11.0/bin/ray status --address="$ip":6379 2>&1 || echo '
        '"ray status failed (exit $?)"',
    ]


def test_the_head_script_runs_in_a_shell_and_reads_back(load: Load, tmp_path: Path) -> None:
    inv, plan = planned(load)
    for name, body in (("systemctl", 'echo "active"'), ("ip", "exit 1")):  # no eth1 here: the fallback
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    script = node_state_script(plan, inv.hosts["gpu-01"].engine, "gpu-01", "10.0.0.11")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=True)
    state = cluster_state(plan, {"gpu-01": done.stdout, "gpu-02": "ray_unit=active\n"})
    assert state.ray_units == {"gpu-01": "active", "gpu-02": "active"}
    assert state.engine == "active"
    # no group release on this machine: readlink finds no pointer
    assert state.releases == {"gpu-01": "-", "gpu-02": "-"} and state.release is None
    # no Ray in this venv here: the shell's answer says so, and the group is not formed
    assert state.missing == "0 of 2 Ray nodes alive (ray status failed (exit 127))"
    assert not state.ray_ok


def test_every_unit_active_and_the_cluster_whole_is_ok(load: Load) -> None:
    _, plan = planned(load)
    state = cluster_state(plan, {"gpu-01": head_answer(), "gpu-02": "ray_unit=active\n"})
    assert state.ray_ok and state.problems() == []
    assert state.summary() == "ray 2/2 active, formed"
    assert state.to_json() == {
        "group": "big",
        "head": "gpu-01",
        "launcher": "ray",
        "ray_units": {"gpu-01": "active", "gpu-02": "active"},
        "ray_nodes": 2,
        "ray_gpus": 16.0,
        "formed": True,
        "engine_unit": "vllmctl-llama-405b-0.service",
        "engine": "inactive",
        "releases": {"gpu-01": "-", "gpu-02": "-"},
        "known_good": {"gpu-01": "-", "gpu-02": "-"},
        "api_servers": {},
        "ok": True,
    }


def test_the_group_release_is_the_one_every_node_is_on_and_a_mixed_group_is_a_problem(load: Load) -> None:
    _, plan = planned(load)
    pointers = "release=releases/R1\nknown_good=releases/R1\n"
    state = cluster_state(
        plan, {"gpu-01": pointers + head_answer(), "gpu-02": "ray_unit=active\n" + pointers}
    )
    assert (state.release, state.problems()) == ("R1", [])
    assert state.to_json()["known_good"] == {"gpu-01": "R1", "gpu-02": "R1"}
    mixed = "release=releases/R2\nknown_good=releases/R1\n"
    state = cluster_state(plan, {"gpu-01": pointers + head_answer(), "gpu-02": "ray_unit=active\n" + mixed})
    assert state.release is None
    assert state.problems() == [
        "nodes are on different group releases (gpu-01 R1, gpu-02 R2): re-run `vllmctl cluster`"
    ]


def test_a_failed_worker_unit_and_a_missing_node_are_not_ok(load: Load) -> None:
    _, plan = planned(load)
    state = cluster_state(plan, {"gpu-01": head_answer(status=HALF), "gpu-02": "ray_unit=failed\n"})
    assert not state.ray_ok
    assert state.summary() == "ray 1/2 active, not formed"
    assert state.problems() == ["Ray unit on gpu-02 is failed", "ray status: 1 of 2 Ray nodes alive"]


@pytest.mark.parametrize(
    ("said", "missing"),
    [
        ("", "0 of 2 Ray nodes alive"),
        ("\n", "0 of 2 Ray nodes alive"),
        (
            "ConnectionError: GCS at 10.0.0.11:6379 unreachable\n",
            "0 of 2 Ray nodes alive (ConnectionError: GCS",
        ),
    ],
)
def test_a_ray_status_that_is_no_status_is_not_formed(load: Load, said: str, missing: str) -> None:
    _, plan = planned(load)
    state = cluster_state(plan, {"gpu-01": head_answer(status=said), "gpu-02": "ray_unit=active\n"})
    assert state.missing is not None and state.missing.startswith(missing)
    assert not state.ray_ok


def test_a_whole_cluster_with_one_unit_not_active_is_not_ok(load: Load) -> None:
    _, plan = planned(load)
    state = cluster_state(plan, {"gpu-01": head_answer(), "gpu-02": "ray_unit=activating\n"})
    assert state.formed and not state.ray_ok


def test_a_node_that_cannot_be_asked_is_part_of_the_answer(load: Load) -> None:
    _, plan = planned(load)
    down = TransportError("gpu-01 (ops@10.0.0.11:22): unreachable (timed out)", "check the host")
    state = cluster_state(plan, {"gpu-01": down, "gpu-02": "ray_unit=active\n"})
    assert state.ray_units == {"gpu-01": "unreachable", "gpu-02": "active"}
    assert state.engine == "unreachable"
    assert state.problems() == [
        "gpu-01: unreachable: gpu-01 (ops@10.0.0.11:22): unreachable (timed out)",
        "ray status: 0 of 2 Ray nodes alive",
    ]


def group_entry(state: ClusterState, healthy: bool | None = True) -> ModelStatus:
    base = ModelStatus("gpu-01", "llama-405b", 8100, service_state="not installed", healthy=healthy)
    [entry] = with_groups([base], {"llama-405b": state})
    return entry


def test_the_status_entry_is_ok_only_with_the_group_whole_and_the_engine_healthy(load: Load) -> None:
    _, plan = planned(load)
    whole = cluster_state(plan, {"gpu-01": head_answer(engine="active"), "gpu-02": "ray_unit=active\n"})
    half = cluster_state(plan, {"gpu-01": head_answer(engine="active"), "gpu-02": "ray_unit=failed\n"})
    stopped = cluster_state(plan, {"gpu-01": head_answer(), "gpu-02": "ray_unit=active\n"})
    assert group_entry(whole).service_state == "active"  # the group gather's view of the head's unit
    assert group_entry(whole).ok
    assert not group_entry(half).ok
    assert not group_entry(whole, healthy=False).ok
    assert not group_entry(stopped).ok


def test_the_status_entry_shows_the_group_release_in_its_release_column(load: Load) -> None:
    _, plan = planned(load)
    pointers = "release=releases/R1\nknown_good=releases/R1\n"
    state = cluster_state(
        plan, {"gpu-01": pointers + head_answer(), "gpu-02": "ray_unit=active\n" + pointers}
    )
    entry = group_entry(state)
    assert entry.release == "R1" and status_row(entry)["release"] == "R1"
    assert status_json([entry])["entries"][0]["release"] == "R1"


def test_the_status_row_findings_and_json_show_the_group(load: Load) -> None:
    _, plan = planned(load)
    state = cluster_state(plan, {"gpu-01": head_answer(status=HALF), "gpu-02": "ray_unit=failed\n"})
    entry = group_entry(state, healthy=None)
    row = status_row(entry)
    assert (row["host"], row["model"], row["port"]) == ("gpu-01 (group big)", "llama-405b", "8100")
    assert row["service"] == "inactive, ray 1/2 active, not formed"
    assert findings([entry]) == [
        "gpu-01/llama-405b:8100: group big: Ray unit on gpu-02 is failed",
        "gpu-01/llama-405b:8100: group big: ray status: 1 of 2 Ray nodes alive",
    ]
    doc = status_json([entry])
    assert doc["ok"] is False
    assert doc["entries"][0]["service_state"] == "inactive"
    assert doc["entries"][0]["group"] == {
        **state.to_json(),
        "problems": ["Ray unit on gpu-02 is failed", "ray status: 1 of 2 Ray nodes alive"],
    }
    assert state.to_json()["ok"] is False


def test_single_host_entries_have_no_group() -> None:
    entry = ModelStatus("gpu-03", "small", 8200, service_state="active", healthy=True)
    assert status_json([entry])["entries"][0]["group"] is None
    assert status_row(entry)["host"] == "gpu-03"


def test_a_group_that_could_not_be_read_is_an_error_entry() -> None:
    entry = ModelStatus("gpu-01", "llama-405b", 8100, service_state="active", healthy=True)
    failed = VllmctlError("architecture of 'x' is not known offline", "load it")
    [shown] = with_groups([entry], {"llama-405b": failed})
    assert shown.error == "cluster: architecture of 'x' is not known offline" and not shown.ok


@pytest.mark.parametrize("limit", [["gpu-01"], ["gpu-02"], ["gpu-03"], ["gpu-03", "gpu-02", "gpu-01"]])
def test_any_host_of_the_group_brings_its_one_entry_on_the_head(load: Load, limit: list[str]) -> None:
    inv, _ = planned(load, SINGLE)
    found = [(e.host, e.model, e.base_url) for e in endpoints_for(inv, limit)]
    grouped = [("gpu-01", "llama-405b", "http://10.0.0.11:8100")]
    single = [("gpu-03", "small", "http://10.0.0.13:8200")] if "gpu-03" in limit else []
    assert sorted(found) == sorted(grouped + single)
    assert group_models(inv, limit) == ["llama-405b"]


def test_group_models_follow_model_selection(load: Load) -> None:
    inv, _ = planned(load, SINGLE)
    assert group_models(inv, ["gpu-03"], ["small"]) == []
    assert group_models(inv, ["gpu-02"], ["llama-405b"]) == ["llama-405b"]
