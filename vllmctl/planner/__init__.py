"""Pure planning: vLLM/SGLang startup memory, engine-flag choice with reasons, per-host inventory plans."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import InputError, VllmctlError
from vllmctl.planner.choose import plan_vllm
from vllmctl.planner.guesses import guess_reasons
from vllmctl.planner.sglang_choose import plan_sglang
from vllmctl.planner.types import PROFILES, Decision, DeploymentPlan, DeploymentRequest, Replica
from vllmctl.planner.vllm_memory import MemoryBreakdown


def plan_deployment(
    arch: ModelArch, gpu: GpuModel, gpu_count: int, request: DeploymentRequest
) -> DeploymentPlan:
    """Engine flags, replicas and memory for one model on `gpu_count` GPUs of one kind (per node).

    Fleets repeat the same (model, GPU, request) many times, so plans are memoised; plans are
    frozen and must not be mutated by callers.
    """
    if gpu_count < 1:
        raise InputError(f"{arch.name}: no GPUs to plan on", "declare gpus for the host or gather facts")
    if request.profile not in PROFILES:
        raise InputError(f"unknown profile {request.profile!r}", f"choose one of {', '.join(PROFILES)}")
    r = request
    key = (r.engine, r.engine_version, r.profile, r.max_model_len, r.allow_context_shrink, r.concurrency,
           r.nodes, r.base_port, tuple(sorted(r.engine_args.items())), r.use_case,
           tuple(sorted(r.sampling.items())), r.images_per_prompt, r.videos_per_prompt,
           r.workload, r.host, r.allow_long_max_model_len, r.tight_fit,
           r.sampler, r.model_runner, r.lora, r.draft)  # fmt: skip
    try:
        hashed = hash(key)
    except TypeError:  # nested mappings in engine_args (compilation_config, ...): plan without the memo
        return _plan(arch, gpu, gpu_count, request)
    outcome = _memo(arch, gpu, gpu_count, _Key(request, key, hashed))
    if isinstance(outcome, VllmctlError):
        raise outcome.with_traceback(None)  # the memoised error: its old traceback is not kept
    return outcome


def _plan(arch: ModelArch, gpu: GpuModel, gpu_count: int, request: DeploymentRequest) -> DeploymentPlan:
    if request.engine == "sglang":
        plan = plan_sglang(arch, gpu, gpu_count, request)
    else:
        plan = plan_vllm(arch, gpu, gpu_count, request)
    if not arch.guessed:
        return plan
    return replace(plan, warnings=(*plan.warnings, *guess_reasons(arch)), guessed=arch.guessed)


class _Key:
    """Hashes on a precomputed key while carrying the request itself."""

    def __init__(self, request: DeploymentRequest, key: object, hashed: int) -> None:
        self.request, self.key, self.hashed = request, key, hashed

    def __hash__(self) -> int:
        return self.hashed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and self.key == other.key


@lru_cache(maxsize=4096)
def _memo(arch: ModelArch, gpu: GpuModel, gpu_count: int, key: _Key) -> DeploymentPlan | VllmctlError:
    try:
        return _plan(arch, gpu, gpu_count, key.request)
    except VllmctlError as exc:  # failures repeat across a fleet too; remembered, raised afresh each time
        return exc


__all__ = [
    "Decision",
    "DeploymentPlan",
    "DeploymentRequest",
    "MemoryBreakdown",
    "Replica",
    "plan_deployment",
]
