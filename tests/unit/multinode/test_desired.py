"""apply's per-host path stages a multi-node model on every node (weights, venv, env file) but starts
nothing per host: the model is brought up as one group release after the per-host tasks."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.inventory.model import Inventory
from vllmctl.tasks import expand
from vllmctl.tasks.desired import HostContext

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


def test_every_node_of_a_multi_node_model_gets_its_weights_venv_and_env_file_but_no_unit(load: Load) -> None:
    inv = load(
        "groups:\n  big: {hosts: [gpu-01, gpu-02], multi_node: true, cluster_interface: eth1}\n"
        "models:\n"
        "  big-model: {source: /srv/models/big, hosts: big}\n"
    )
    worker = HostContext(inv, inv.hosts["gpu-02"])
    assert [m.name for m in worker.staged_models()] == ["big-model"] and worker.models() == []
    staged = [call.args["dest"] for call in expand("model_staging", {}, worker)]
    assert staged == ["/srv/models/big"]
    venvs = [call.args for call in expand("engine_install", {}, worker) if call.op == "engine_venv"]
    assert [v["version"] for v in venvs] == ["0.11.0"]
    env_files = [call.args["path"] for call in expand("model_env_files", {}, worker)]
    assert env_files == ["/etc/vllmctl/big-model.env"]
    assert expand("model_units", {}, worker) == [] and expand("model_services", {}, worker) == []
