"""apply's per-host path leaves a multi-node model alone: `vllmctl cluster` brings it up as one engine."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.desired import HostContext, expand
from vllmctl.inventory.model import Inventory

Load = Callable[[str], Inventory]


def test_per_host_tasks_skip_multi_node_models_but_keep_the_others(load: Load) -> None:
    inv = load(
        "groups:\n  big: {hosts: [gpu-01, gpu-02], multi_node: true, cluster_interface: eth1}\n"
        "models:\n"
        "  big-model: {source: meta-llama/Llama-3.1-405B, hosts: big}\n"
        "  small: {source: Qwen/Qwen3-8B, hosts: gpu-01, port: 8100}\n"
    )
    ctx = HostContext(inv, inv.hosts["gpu-01"])
    assert [m.name for m in ctx.models()] == ["small"]
    units = [call.args["name"] for call in expand("model_units", {}, ctx)]
    assert units == ["vllmctl-small-0.service"]
