"""Launcher data_parallel as a group release, pure: the units each node gets with balancing internal (the
head's API server, the other nodes `--headless`), the manifests every node records, the group's status
without Ray, and balancing external with an API server on every used node."""

from __future__ import annotations

from collections.abc import Callable

from dp_inventory import dp_inventory

from vllmctl.bench.endpoints import endpoints_for
from vllmctl.inventory.model import EngineSpec, Inventory
from vllmctl.multinode.group_ops import started_as
from vllmctl.multinode.plan import ClusterPlan, plan_cluster
from vllmctl.releases.group import api_servers, group_manifests, group_spec
from vllmctl.runner.multinode.cluster import group_api_hosts
from vllmctl.status.group import cluster_state, node_state_script, with_groups
from vllmctl.status.model import ModelStatus

Load = Callable[[str], Inventory]
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2", "gpu-03": "192.168.50.3"}
ENGINE = "vllmctl-dsv3-0.service"
INVENTORY = dp_inventory()
EXTERNAL = INVENTORY.replace("size: 16}", "size: 16, balancing: external}")


def planned(load: Load, text: str = INVENTORY) -> tuple[Inventory, ClusterPlan, EngineSpec]:
    inv = load(text)
    model = inv.models["dsv3"]
    assert model.cluster is not None and model.engine is not None
    return inv, plan_cluster(inv, model, model.cluster), model.engine


def exec_start(unit: str) -> str:
    return next(line for line in unit.splitlines() if line.startswith("ExecStart="))


def test_internal_puts_the_api_server_on_the_head_and_headless_ranks_on_the_other_node(load: Load) -> None:
    inv, plan, engine = planned(load)
    spec = group_spec(inv, plan, engine, ADDRESSES, start_engine=True)
    assert (spec.launcher, spec.ray_address, spec.head, tuple(spec.nodes)) == (
        "data_parallel",
        "",
        "gpu-01",
        ("gpu-01", "gpu-02"),
    )  # gpu-03 is spare: no unit, no release there
    assert {node: sorted(units) for node, units in spec.units.items()} == {
        "gpu-01": [ENGINE],
        "gpu-02": [ENGINE],
    }
    head, other = spec.units["gpu-01"][ENGINE], spec.units["gpu-02"][ENGINE]
    assert head.splitlines()[2].endswith("(vllm 0.32.0, TP 1, internal, API server)")
    assert other.splitlines()[2].endswith("(vllm 0.32.0, TP 1, internal, headless)")
    assert exec_start(head).endswith(
        "--data-parallel-size-local 8 --data-parallel-address 192.168.50.1 --data-parallel-rpc-port 29550"
    )
    assert exec_start(other).endswith(
        "--data-parallel-address 192.168.50.1 --data-parallel-rpc-port 29550 "
        "--data-parallel-start-rank 8 --headless"
    )
    assert "Environment=VLLM_HOST_IP=192.168.50.2" in other.splitlines()
    assert "ray" not in (head + other).lower()  # no Ray unit, address or variable
    assert spec.models == {"dsv3": {"source": "deepseek-ai/DeepSeek-V3", "revision": None, "ports": [8000],
                                    "slo": {}}}  # fmt: skip
    # without an engine there is nothing to run: `vllmctl cluster` always starts it (cluster_flow.py)
    assert group_spec(inv, plan, engine, ADDRESSES, start_engine=False).units == {"gpu-01": {}, "gpu-02": {}}


def test_every_node_records_the_same_release_with_the_data_parallel_layout(load: Load) -> None:
    inv, plan, engine = planned(load)
    made = group_manifests(
        group_spec(inv, plan, engine, ADDRESSES, True), "2026-12-03T09:00:05+00:00", "ops@ctl", "d" * 64
    )
    assert list(made) == ["gpu-01", "gpu-02"] and made["gpu-01"].id == made["gpu-02"].id
    for node, manifest in made.items():
        assert (manifest.launcher, manifest.head, list(manifest.nodes), manifest.ray_address) == (
            "data_parallel",
            "gpu-01",
            ["gpu-01", "gpu-02"],
            "",
        )
        layout = manifest.plan["data_parallel"]
        assert (layout["data_parallel_size"], layout["start_ranks"], layout["vllm_mode"]) == (
            16,
            {"gpu-01": 0, "gpu-02": 8},
            "internal",
        )
        assert list(manifest.units) == [ENGINE] and manifest.host == node
    assert made["gpu-01"].models["dsv3"]["ports"] == [8000] and made["gpu-02"].models == {}
    assert started_as(made["gpu-01"], "gpu-01", 0) == "API server, DP 16 x TP 1"
    assert started_as(made["gpu-01"], "gpu-02", 1) == "headless, DP ranks 8-15"


def test_balancing_external_is_deployed_with_an_api_server_on_every_node(load: Load) -> None:
    inv, plan, engine = planned(load, EXTERNAL)
    assert plan.data_parallel is not None and plan.data_parallel.mode == "hybrid"
    spec = group_spec(inv, plan, engine, ADDRESSES, start_engine=True)
    made = group_manifests(spec, "2026-12-03T09:00:00+00:00", "ops@ctl", "d1")
    for node in ("gpu-01", "gpu-02"):
        start = exec_start(spec.units[node][ENGINE])
        assert "--data-parallel-hybrid-lb" in start and "--headless" not in start, node
        assert "--port 8000" in start, node
    assert api_servers(made["gpu-01"]) == [("gpu-01", 8000), ("gpu-02", 8000)]  # gpu-03 is spare
    internal = group_spec(*planned(load), ADDRESSES, start_engine=True)
    head = group_manifests(internal, "2026-12-03T09:00:00+00:00", "ops@ctl", "d1")["gpu-01"]
    assert api_servers(head) == [("gpu-01", 8000)]


def test_the_group_status_counts_each_nodes_engine_unit_and_asks_no_ray(load: Load) -> None:
    _, plan, engine = planned(load)
    script = node_state_script(plan, engine, "gpu-01", "10.0.0.11")
    assert "ray status" not in script and f"echo ray_unit=$(systemctl is-active {ENGINE})" in script
    answers: dict[str, str | Exception] = {
        "gpu-01": "ray_unit=active\nrelease=releases/R1\nknown_good=releases/R1\nengine_unit=active\n",
        "gpu-02": "ray_unit=failed\nrelease=releases/R1\nknown_good=releases/R1\n",
    }
    state = cluster_state(plan, answers)  # type: ignore[arg-type]
    assert (state.launcher, state.missing) == ("data_parallel", "1 of 2 ranks' units active")
    assert "engine unit on gpu-02 is failed" in state.problems() and state.summary().startswith("ranks 1/2")
    answers["gpu-02"] = "ray_unit=active\nrelease=releases/R1\nknown_good=releases/R1\n"
    assert cluster_state(plan, answers).ray_ok  # type: ignore[arg-type]


def test_status_has_an_entry_per_api_server_of_an_external_group_each_with_its_own_nodes_unit(
    load: Load,
) -> None:
    inv, plan, _ = planned(load, EXTERNAL)
    api = group_api_hosts(inv, ["dsv3"])
    assert api == {"dsv3": ("gpu-01", "gpu-02")}  # gpu-03 is spare
    assert group_api_hosts(planned(load)[0], ["dsv3"]) == {"dsv3": ("gpu-01",)}
    found = endpoints_for(inv, ["gpu-03"], api_hosts=api)  # any host of the group lists the group
    assert [(e.host, e.base_url) for e in found] == [
        ("gpu-01", "http://10.0.0.11:8000"),
        ("gpu-02", "http://10.0.0.12:8000"),
    ]
    assert [e.host for e in endpoints_for(inv, ["gpu-03"])] == ["gpu-01"]  # not told: the head alone
    answers: dict[str, str | Exception] = {
        "gpu-01": "ray_unit=active\nrelease=releases/R1\nknown_good=releases/R1\nengine_unit=active\n",
        "gpu-02": "ray_unit=failed\nrelease=releases/R1\nknown_good=releases/R1\n",
    }
    state = cluster_state(plan, answers, 8000)  # type: ignore[arg-type]
    assert state.to_json()["api_servers"] == {"gpu-01": 8000, "gpu-02": 8000}
    entries = [ModelStatus(node, "dsv3", 8000) for node in ("gpu-01", "gpu-02")]
    shown = with_groups(entries, {"dsv3": state})
    assert [(s.host, s.service_state, s.release) for s in shown] == [
        ("gpu-01", "active", "R1"),
        ("gpu-02", "failed", "R1"),
    ]
