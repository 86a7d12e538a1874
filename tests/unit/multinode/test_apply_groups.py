"""apply's multi-node step, the pure parts: which models are groups and how they are planned, what a deploy
would change on each node (the --check answer), and the groups apply leaves alone (--limit, failed hosts).
Deploying for real is the lab test test_lab_apply_group.py."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

import pytest

from vllmctl.inventory.model import ClusterSpec, Inventory
from vllmctl.releases.group import GroupManifest, GroupSpec, group_manifests
from vllmctl.releases.host import HostReleases, Release
from vllmctl.runner.fleet.hosts import load_model_archs, planned_inventory
from vllmctl.runner.multinode.apply_groups import (
    GroupApplyOptions,
    GroupRun,
    apply_groups,
    group_plans,
    pending_changes,
    summary,
)
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.tasks.desired import HostContext

Load = Callable[[str], Inventory]
RAY, ENGINE = "vllmctl-ray-big.service", "vllmctl-big-model-0.service"
UNITS = {
    "gpu-01": {RAY: "[Service]\n# head\n", ENGINE: "[Service]\n# engine\n"},
    "gpu-02": {RAY: "# worker\n"},
}
INVENTORY = (
    "groups:\n  big: {hosts: [gpu-01, gpu-02], multi_node: true, cluster_interface: eth1}\n"
    "models:\n"
    "  big-model: {source: meta-llama/Llama-3.1-405B, hosts: big, max_model_len: 8192}\n"
    "  small: {source: Qwen/Qwen3-8B, hosts: gpu-03, port: 8100}\n"
)


def wanted() -> dict[str, GroupManifest]:
    spec = GroupSpec(
        "big", "big-model", "gpu-01", ("gpu-01", "gpu-02"), 8, 2, 8, "10.0.0.11:6379", "vllm", "0.11.0",
        "/opt/vllmctl/venvs/vllm-0.11.0", UNITS, {"big-model": {"source": "x", "ports": [8000]}},
    )  # fmt: skip
    return dict(group_manifests(spec, "2026-11-21T09:00:05+00:00", "ops@ctl", "d" * 64))


def serving(release_status: str = "good") -> dict[str, HostReleases]:
    made = wanted()
    verdict = {"passed": release_status == "good"}
    return {node: HostReleases((Release(m.id, True, m, verdict),), m.id, m.id) for node, m in made.items()}


def installed(state: str = "active", **texts: str) -> dict[str, dict[str, tuple[str, str | None]]]:
    def digest(node: str, unit: str) -> str | None:
        text = texts.get(unit.split("-")[1], UNITS[node][unit])
        return hashlib.sha256(text.encode()).hexdigest() if text != "absent" else None

    return {node: {u: (state, digest(node, u)) for u in units} for node, units in UNITS.items()}


def test_a_group_serving_the_wanted_units_changes_nothing() -> None:
    assert pending_changes(wanted(), serving(), installed()) == []


def test_each_unit_that_differs_is_named_with_what_apply_would_do() -> None:
    changed = pending_changes(wanted(), {}, installed(ray="# old ray\n"))
    assert changed == [
        f"gpu-01: {RAY} would change and be restarted",
        f"gpu-02: {RAY} would change and be restarted",
    ]
    missing = pending_changes(wanted(), {}, installed(big="absent"))
    assert missing == [f"gpu-01: {ENGINE} would be installed and started"]
    stopped = pending_changes(wanted(), serving(), installed("failed"))
    assert f"gpu-02: {RAY} is failed: would be started" in stopped and len(stopped) == 3


def test_a_changed_env_file_alone_restarts_the_engine_of_a_serving_group() -> None:
    assert pending_changes(wanted(), serving(), installed(), env_changed=True) == [
        "gpu-01: /etc/vllmctl/big-model.env changed: the engine would be restarted"
    ]


def test_same_units_but_no_good_release_would_record_one() -> None:
    made = wanted()
    release = next(iter(made.values())).id
    assert pending_changes(made, serving("failed"), installed()) == [
        f"group release {release} would be recorded on gpu-01, gpu-02"
    ]


def test_only_models_on_a_multi_node_group_are_planned_as_groups(load: Load) -> None:
    inv = load(INVENTORY)
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    assert list(plans) == ["big-model"]
    assert (plans["big-model"].hosts, plans["big-model"].tp, plans["big-model"].pp) == (
        ("gpu-01", "gpu-02"),
        8,
        2,
    )


def test_a_group_cut_by_limit_or_a_failed_node_is_not_started_and_says_why(load: Load) -> None:
    inv = load(INVENTORY)
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    opts = GroupApplyOptions(check=False, gate=GroupGateOptions())
    logged: list[str] = []
    (cut,) = apply_groups(inv, plans, ["gpu-01", "gpu-03"], [], opts, logged.append)
    assert (cut.status, cut.failed, cut.changed) == ("skipped", False, False)
    assert cut.reasons == ("--limit leaves out gpu-02: a multi-node model is deployed on all its nodes",)
    (broken,) = apply_groups(inv, plans, ["gpu-01", "gpu-02"], ["gpu-02"], opts, logged.append)
    assert (broken.status, broken.failed) == ("not_started", True)
    assert broken.to_json()["ok"] is False and logged == []


def test_no_group_starts_once_the_rollout_stopped_and_a_failed_group_counts(
    load: Load, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllmctl.releases.rollout import MaxFail, RolloutLedger
    from vllmctl.runner.multinode import apply_groups as module
    from vllmctl.runner.releases.rollout import RolloutGuard

    inv = load(INVENTORY)
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    guard = RolloutGuard([], {}, RolloutLedger(MaxFail(), total=3))
    guard.fail("gpu-03", "release r2: rolled_back")
    opts = GroupApplyOptions(check=False, gate=GroupGateOptions(), guard=guard)
    (held,) = apply_groups(inv, plans, ["gpu-01", "gpu-02"], [], opts, lambda line: None)
    assert (held.status, held.failed) == ("skipped", False)
    assert held.reasons == ("not started: the rollout stopped: 1 failed (gpu-03), more than --max-fail 0",)

    failing = GroupRun("big-model", "big", ("gpu-01", "gpu-02"), "rolled_back", "R2", ("unhealthy",), "R1")
    monkeypatch.setattr(module, "_one", lambda *args: failing)
    guard = RolloutGuard([], {}, RolloutLedger(MaxFail(1), total=3))
    (ran,) = apply_groups(inv, plans, ["gpu-01", "gpu-02"], [], replace(opts, guard=guard), lambda line: None)
    assert ran is failing and guard.ledger.failed == {"group big": "rolled_back"}


def test_the_summary_names_group_model_nodes_release_and_rollback() -> None:
    run = GroupRun("big-model", "big", ("gpu-01", "gpu-02"), "rolled_back", "R2", ("unhealthy",), "R1")
    assert summary([run]) == [
        "group big (big-model on gpu-01, gpu-02): rolled_back release R2, rolled back to R1"
    ]
    assert run.failed and run.changed and run.to_json()["rolled_back_to"] == "R1"


def test_a_model_whose_plan_needs_several_plain_list_hosts_becomes_a_group_named_after_it(load: Load) -> None:
    plain = INVENTORY.replace("hosts: big,", "hosts: [gpu-01, gpu-02],").split("models:")[1]
    inv = planned_inventory(load("models:" + plain))
    big = inv.models["big-model"]
    assert big.cluster == ClusterSpec("big-model", ("gpu-01", "gpu-02")) and inv.clusters == {
        "big-model": big.cluster
    }
    assert inv.models["small"].cluster is None
    assert HostContext(inv, inv.hosts["gpu-01"]).models() == []  # never started per host
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    assert (list(plans), plans["big-model"].pp, plans["big-model"].tp) == (["big-model"], 2, 8)
    fits = load("models:\n  small: {source: Qwen/Qwen3-8B, hosts: [gpu-01, gpu-02], port: 8100}\n")
    assert planned_inventory(fits) is fits  # one host holds it: a replica per host, as before


def test_a_group_rollback_does_not_start_once_the_rollout_stopped(load: Load) -> None:
    from vllmctl.releases.group_history import GroupNodes
    from vllmctl.runner.multinode.group_rollback import roll_back_groups

    def no_node(name: str) -> object:
        raise AssertionError(f"{name} was connected to")

    groups = [GroupNodes("big", "big-model", ("gpu-01", "gpu-02"))]
    opts = GroupGateOptions(connect=no_node)  # type: ignore[arg-type]
    done = roll_back_groups(
        load(INVENTORY), groups, None, opts, lambda line: None, lambda: "the rollout stopped"
    )
    assert done == {
        "big": {"nodes": ["gpu-01", "gpu-02"], "ok": False, "reasons": ["not started: the rollout stopped"]}
    }
