"""The tiny MoE: a Mixtral with the tiny Llama's attention and tokenizer, four experts (two per token),
weights named as vLLM's Mixtral loader reads them, cached under its own key; the planner reads it as MoE, so
external data parallel (refused for the dense tiny Llama) plans for it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from vllmctl.catalog.loader import load_arch
from vllmctl.errors import PlanError
from vllmctl.inventory import load_inventory
from vllmctl.lab import tinymodel, tinymoe
from vllmctl.multinode.plan import ClusterPlan, plan_cluster


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tinymoe.ensure_tiny_moe_model(tmp_path_factory.mktemp("models"))


def test_a_mixtral_with_the_llamas_attention_and_four_experts(moe_dir: Path) -> None:
    config = json.loads((moe_dir / "config.json").read_text())
    llama = tinymodel.tiny_config()
    assert config["architectures"] == ["MixtralForCausalLM"] and config["model_type"] == "mixtral"
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (4, 2)
    for key in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"):
        assert config[key] == llama[key], key
    assert (moe_dir / "tokenizer.json").read_text() == tinymodel.train_tokenizer(
        tinymodel.tiny_corpus()
    ).to_str(pretty=True) + "\n"


def test_weights_are_the_routers_and_experts_and_no_dense_mlp(moe_dir: Path) -> None:
    weights = load_file(str(moe_dir / "model.safetensors"))
    config = tinymoe.tiny_moe_config()
    assert {name: array.shape for name, array in weights.items()} == tinymoe.moe_weight_shapes(config)
    assert not [name for name in weights if ".mlp." in name]
    layer = "model.layers.1.block_sparse_moe"
    assert weights[f"{layer}.gate.weight"].shape == (4, 256)
    assert weights[f"{layer}.experts.3.w1.weight"].shape == weights[f"{layer}.experts.3.w3.weight"].shape
    assert weights[f"{layer}.experts.3.w2.weight"].shape == (256, 512)
    assert all(array.dtype == np.float32 and np.isfinite(array).all() for array in weights.values())


def test_cached_under_its_own_key_beside_the_llama(tmp_path: Path, moe_dir: Path) -> None:
    built = tinymoe.ensure_tiny_moe_model(tmp_path)
    assert built.name == f"tiny-moe-{tinymodel.content_key(tinymoe.tiny_moe_config())}"
    assert tinymodel.content_key(tinymoe.tiny_moe_config()) != tinymodel.content_key()
    assert tinymoe.ensure_tiny_moe_model(tmp_path) == built
    assert tinymodel.tiny_model_digest(built) == tinymodel.tiny_model_digest(moe_dir)


GROUP = """\
vllmctl: 1
defaults:
  engine: {name: vllm, version: "0.32.0"}
  gpus: {model: H100-80GB, count: 1}
hosts:
  a: {address: 10.0.0.1}
  b: {address: 10.0.0.2}
groups:
  pair:
    hosts: [a, b]
    multi_node: true
    cluster_interface: eth0
    launcher: data_parallel
    data_parallel: {size: 2, size_local: 1, balancing: external}
models:
  tiny: {source: SOURCE, hosts: pair, max_model_len: 512, engine_args: {tensor_parallel_size: 1}}
"""


def test_external_data_parallel_plans_for_it_and_not_for_the_dense_llama(
    tmp_path: Path, moe_dir: Path
) -> None:
    arch = load_arch(str(moe_dir), None, online=False)
    assert arch.is_moe and arch.num_experts == 4

    def planned(source: Path) -> ClusterPlan:
        path = tmp_path / "inv.yml"
        path.write_text(GROUP.replace("SOURCE", str(source)))
        inv = load_inventory(path)
        model = inv.models["tiny"]
        assert model.cluster is not None
        return plan_cluster(inv, model, model.cluster, None, load_arch(str(source), None, online=False))

    plan = planned(moe_dir)
    assert plan.data_parallel is not None and plan.data_parallel.mode == "external"
    assert plan.api_hosts == ("a", "b")
    with pytest.raises(PlanError, match="Non-MoE models do not support external data parallel mode"):
        planned(tinymodel.ensure_tiny_model(tmp_path))
