"""vLLM's startup rules as data: each case file under rule_cases/ holds inputs that break one rule (with what
vLLM says and the exit the user gets) and a valid neighbour that still plans. Every rule has a case file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from plan_settings import settings_from_plan

from vllmctl.catalog.arch import ModelArch, parse_config
from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.errors import InputError, PlanError
from vllmctl.planner import DeploymentRequest, plan_deployment
from vllmctl.planner.rules import RULES, refusals
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.tuning import normalize_args
from vllmctl.planner.types import LoraRequest
from vllmctl.planner.vllm_base import with_explicit_quantization
from vllmctl.planner.vllm_guard import RefusedFlagsError

CASES = Path(__file__).parent / "rule_cases"


def _load() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(CASES.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        assert doc["rule"] == path.stem, f"{path.name} names rule {doc['rule']!r}"
        found += [(doc["rule"], case) for case in doc["cases"]]
    return found


ALL = _load()


def _arch(case: dict[str, Any]) -> ModelArch:
    if "config" in case:
        return parse_config(case["config"], case["name"])
    return load_arch(case["model"], online=False)


def _request(case: dict[str, Any]) -> DeploymentRequest:
    return DeploymentRequest(
        engine_version=str(case.get("version", "0.11.0")),
        max_model_len=case.get("max_model_len"),
        engine_args=dict(case.get("engine_args", {})),
        nodes=int(case.get("nodes", 1)),
        host=HostResources(**case.get("host", {})),
        allow_long_max_model_len=bool(case.get("allow_long_max_model_len", False)),
        lora=LoraRequest(tuple(case["adapter_ranks"])) if case.get("adapter_ranks") else None,
        draft=load_arch(case["draft_model"], online=False) if case.get("draft_model") else None,
    )


def _plan(case: dict[str, Any]) -> Any:
    return plan_deployment(_arch(case), lookup_gpu(case["gpu"]), int(case["gpus"]), _request(case))


def test_every_rule_has_a_case_file() -> None:
    covered = {rule for rule, _ in ALL}
    assert covered == {rule.name for rule in RULES}


@pytest.mark.parametrize(("rule", "case"), ALL, ids=[f"{rule}: {case['name']}" for rule, case in ALL])
def test_violating_input_is_refused_with_vllms_words(rule: str, case: dict[str, Any]) -> None:
    expected = InputError if case["exit"] == 2 else PlanError
    with pytest.raises(expected) as caught:
        _plan(case)
    assert caught.value.exit_code == case["exit"]
    assert case["says"] in caught.value.message, caught.value.message
    if case["exit"] == 2:
        assert isinstance(caught.value, RefusedFlagsError)
        assert rule in [r.rule for r in caught.value.refusals]
    else:
        assert rule in caught.value.message
    if "fix" in case:
        assert case["fix"] in caught.value.hint, caught.value.hint


@pytest.mark.parametrize(("rule", "case"), ALL, ids=[f"{rule}: {case['name']}" for rule, case in ALL])
def test_valid_neighbour_still_plans_and_passes_every_rule(rule: str, case: dict[str, Any]) -> None:
    neighbour = {**case, **case["neighbour"]}
    if "model" in case["neighbour"]:
        neighbour.pop("config", None)
    plan = _plan(neighbour)
    assert plan.memory.fits
    if "replicas" in neighbour:
        assert len(plan.replicas) == neighbour["replicas"]
    request = _request(neighbour)
    arch = with_explicit_quantization(_arch(neighbour), normalize_args(plan.engine_args).get("quantization"))
    settings = settings_from_plan(plan, request)
    count = int(neighbour["gpus"])
    gpu = lookup_gpu(neighbour["gpu"])
    assert refusals(arch, gpu, count, settings, request.host, None, request.nodes) == []


def test_docs_list_every_rule_with_its_source_and_versions() -> None:
    from vllmctl.planner.rules.docs import rules_markdown

    page = (Path(__file__).resolve().parents[3] / "docs" / "planner.md").read_text()
    assert rules_markdown() in page, "docs/planner.md's rule table is stale: paste rules_markdown() into it"
