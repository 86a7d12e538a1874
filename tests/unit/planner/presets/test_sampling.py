"""Default sampling: use-case presets, explicit sampling winning, explicit engine_args winning over both,
per-engine rendering (vLLM override_generation_config, SGLang preferred_sampling_params) and warnings."""

from __future__ import annotations

import json

import pytest

from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.engine_flags import to_cli
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.presets import USE_CASES, sampling_plan

H100 = lookup_gpu("H100-80GB")
QWEN = load_arch("Qwen/Qwen3-8B")


@pytest.mark.parametrize(
    ("use_case", "expected"),
    [
        ("code", {"repetition_penalty": 1.0, "temperature": 0.0}),
        ("factual", {"repetition_penalty": 1.0, "temperature": 0.1}),
        ("summarization", {"repetition_penalty": 1.1, "temperature": 0.3}),
        ("translation", {"repetition_penalty": 1.1, "temperature": 0.2}),
        ("chat", {"repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.9}),
        ("creative", {"repetition_penalty": 1.0, "temperature": 1.0, "top_p": 0.95}),
    ],
)
def test_each_use_case_sets_its_defaults_with_a_reason(use_case: str, expected: dict[str, float]) -> None:
    plan = plan_deployment(QWEN, H100, 1, DeploymentRequest(use_case=use_case))
    assert plan.engine_args["override_generation_config"] == expected
    reason = plan.reason_for("override_generation_config")
    assert reason is not None and reason.reason.startswith(f"use_case {use_case}: ")
    assert not [w for w in plan.warnings if "temperature" in w]


def test_guide_ranges_hold_for_every_preset() -> None:
    for name, (values, why) in USE_CASES.items():
        assert 0 <= values["temperature"] <= 1.2 and why, name
        assert values.get("top_p", 1.0) <= 1.0
    assert USE_CASES["code"][0]["temperature"] <= 0.2 and "top_p" not in USE_CASES["code"][0]
    assert 0.2 <= USE_CASES["summarization"][0]["temperature"] <= 0.5
    assert 0.8 <= USE_CASES["creative"][0]["temperature"] <= 1.2


def test_no_use_case_and_no_sampling_leaves_the_model_defaults() -> None:
    plan = plan_deployment(QWEN, H100, 1, DeploymentRequest())
    assert "override_generation_config" not in plan.engine_args
    assert "seed" not in plan.engine_args


def test_explicit_sampling_wins_over_the_preset_and_max_tokens_is_renamed() -> None:
    request = DeploymentRequest(
        use_case="code", sampling={"temperature": 0.2, "top_k": 20, "max_tokens": 512}
    )
    plan = plan_deployment(QWEN, H100, 1, request)
    assert plan.engine_args["override_generation_config"] == {
        "max_new_tokens": 512,
        "repetition_penalty": 1.0,
        "temperature": 0.2,
        "top_k": 20,
    }
    reason = plan.reason_for("override_generation_config")
    assert reason is not None
    assert "sampling sets max_tokens, temperature, top_k explicitly (wins over use_case)" in reason.reason


def test_vllm_cannot_default_penalties_so_it_warns_and_seed_is_the_engine_seed() -> None:
    request = DeploymentRequest(sampling={"presence_penalty": 0.5, "frequency_penalty": 0.2, "seed": 7})
    plan = plan_deployment(QWEN, H100, 1, request)
    assert "override_generation_config" not in plan.engine_args
    assert plan.engine_args["seed"] == 7
    assert (
        "sampling frequency_penalty, presence_penalty: vllm has no server-side default for them; "
        "clients must send them per request"
    ) in plan.warnings


def test_sglang_renders_preferred_sampling_params_with_penalties() -> None:
    request = DeploymentRequest(
        engine="sglang",
        engine_version="0.5.2",
        use_case="chat",
        sampling={"presence_penalty": 0.5, "max_tokens": 256, "seed": 3},
    )
    plan = plan_deployment(QWEN, H100, 1, request)
    params = plan.engine_args["preferred_sampling_params"]
    assert params == {
        "max_new_tokens": 256,
        "presence_penalty": 0.5,
        "repetition_penalty": 1.1,
        "temperature": 0.7,
        "top_p": 0.9,
    }
    assert plan.engine_args["random_seed"] == 3
    assert to_cli("sglang", "preferred_sampling_params", params) == [
        "--preferred-sampling-params",
        json.dumps(params, separators=(",", ":"), sort_keys=True),
    ]


def test_changing_both_temperature_and_top_p_warns() -> None:
    plan = plan_deployment(QWEN, H100, 1, DeploymentRequest(sampling={"temperature": 0.5, "top_p": 0.8}))
    assert (
        "sampling changes both temperature (0.5) and top_p (0.8); the guides advise tuning one of them and "
        "leaving the other at 1"
    ) in plan.warnings
    # Greedy decoding ignores top_p, and the chat preset alone is the guides' own pairing: no warning.
    greedy = plan_deployment(QWEN, H100, 1, DeploymentRequest(sampling={"temperature": 0.0, "top_p": 0.8}))
    assert not [w for w in greedy.warnings if "both temperature" in w]
    chat = plan_deployment(QWEN, H100, 1, DeploymentRequest(use_case="chat", sampling={"top_p": 1.0}))
    assert not [w for w in chat.warnings if "both temperature" in w]
    chat_top_p = plan_deployment(QWEN, H100, 1, DeploymentRequest(use_case="chat", sampling={"top_p": 0.8}))
    assert [w for w in chat_top_p.warnings if "both temperature (0.7) and top_p (0.8)" in w]


def test_explicit_override_generation_config_wins_and_conflicts_warn() -> None:
    request = DeploymentRequest(
        use_case="chat",
        sampling={"temperature": 0.6},
        engine_args={"override_generation_config": {"temperature": 0.9, "top_p": 0.9}},
    )
    plan = plan_deployment(QWEN, H100, 1, request)
    assert plan.engine_args["override_generation_config"] == {"temperature": 0.9, "top_p": 0.9}
    reason = plan.reason_for("override_generation_config")
    assert reason is not None and reason.reason == "explicit; wins over use_case and sampling"
    assert (
        "engine_args override_generation_config overrides sampling/use_case for temperature "
        "(temperature 0.9 instead of 0.6)"
    ) in plan.warnings


def test_explicit_override_as_json_text_is_compared_too() -> None:
    outcome = sampling_plan("vllm", "code", {}, {"override_generation_config": '{"temperature": 0.3}'})
    assert outcome.decisions[0].value == '{"temperature": 0.3}'
    assert outcome.warnings == (
        "engine_args override_generation_config overrides sampling/use_case for temperature "
        "(temperature 0.3 instead of 0.0)",
    )


def test_the_planned_flag_becomes_exact_vllm_argv() -> None:
    plan = plan_deployment(QWEN, H100, 1, DeploymentRequest(use_case="code"))
    argv = to_cli("vllm", "override_generation_config", plan.engine_args["override_generation_config"])
    assert argv == ["--override-generation-config", '{"repetition_penalty":1.0,"temperature":0.0}']
