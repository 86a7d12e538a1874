"""LoRA and speculative decoding for one vLLM deployment, pure: max_loras and max_lora_rank chosen from the
declared adapters (with a reason each), and the settings vLLM resolves from the engine args."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.adapters import AdapterConfig
from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB
from vllmctl.inventory.model import SpeculativeSpec
from vllmctl.planner.lora_memory import draft_weight_bytes, lora_slot_bytes, mtp_weight_bytes
from vllmctl.planner.settings import LoraSettings, SpeculativeSettings, VllmSettings
from vllmctl.planner.types import Decision, DeploymentPlan, DeploymentRequest, LoraRequest

# The speculative settings passed through to vLLM's SpeculativeConfig under their own names.
_SPECULATIVE_KEYS = (
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "prompt_lookup_min",
    "prompt_lookup_max",
)
# vllm/config/lora.py:104-109 (LoRAConfig.__post_init__): the only values max_lora_rank may take
SUPPORTED_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORA_RANK = 16  # LoRAConfig.max_lora_rank
DEFAULT_MAX_LORAS = 1  # LoRAConfig.max_loras


@dataclass(frozen=True)
class LoraChoice:
    max_loras: int
    max_lora_rank: int
    reasons: Mapping[str, str]

    def engine_args(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The chosen values for the flags `given` (the inventory's engine_args) leaves out."""
        chosen = {"max_loras": self.max_loras, "max_lora_rank": self.max_lora_rank}
        return {k: v for k, v in chosen.items() if k not in given}


def lora_request(configs: Sequence[AdapterConfig | None]) -> LoraRequest:
    """The declared adapters as the planner sizes them; one whose config is unknown counts at vLLM's default
    rank and as targeting every module."""
    ranks = tuple(c.rank if c is not None else DEFAULT_MAX_LORA_RANK for c in configs)
    known = all(c is not None and c.target_modules for c in configs)
    targets = sorted({t for c in configs if c is not None for t in c.target_modules}) if known else []
    return LoraRequest(ranks, tuple(targets), sum(c is None for c in configs))


def smallest_supported_rank(rank: int) -> int | None:
    return next((r for r in SUPPORTED_RANKS if r >= rank), None)


def choose_lora(ranks: Sequence[int], unknown: int = 0) -> LoraChoice:
    """One GPU slot per declared adapter, so all serve in the same batch, at the smallest rank vLLM accepts
    that holds the largest adapter (a larger rank wastes slot memory and kernel work on zero padding)."""
    largest = max(ranks, default=DEFAULT_MAX_LORA_RANK)
    rank = smallest_supported_rank(largest) or largest  # none holds it: the rank rule refuses the plan
    count = max(len(ranks), DEFAULT_MAX_LORAS)
    reasons = {
        "max_loras": f"{count} declared adapter(s), one GPU slot each so all serve in the same batch",
        "max_lora_rank": f"the largest adapter rank is {largest}; {rank} is the smallest rank vLLM accepts "
        f"at or above it ({', '.join(map(str, SUPPORTED_RANKS))})"
        + (
            f"; {unknown} adapter config(s) unreadable here count at vLLM's default {DEFAULT_MAX_LORA_RANK}"
            if unknown
            else ""
        ),
    }
    return LoraChoice(count, rank, reasons)


def lora_settings(
    explicit: Mapping[str, Any], request: DeploymentRequest
) -> tuple[LoraSettings | None, list[Decision]]:
    """LoRA as vLLM will run it: explicit flags win, the declared adapters choose the rest."""
    if request.lora is None and not explicit.get("enable_lora"):
        return None, []
    ranks = request.lora.ranks if request.lora else ()
    choice = (
        choose_lora(ranks, request.lora.unknown)
        if request.lora
        else LoraChoice(DEFAULT_MAX_LORAS, DEFAULT_MAX_LORA_RANK, {})
    )
    decisions = [
        Decision(flag, value, choice.reasons[flag])
        for flag, value in choice.engine_args(explicit).items()
        if flag in choice.reasons
    ]
    cpu = explicit.get("max_cpu_loras")
    settings = LoraSettings(
        max_loras=int(explicit.get("max_loras", choice.max_loras)),
        max_lora_rank=int(explicit.get("max_lora_rank", choice.max_lora_rank)),
        max_cpu_loras=int(cpu) if cpu is not None else None,
        adapter_ranks=tuple(ranks),
        targets=request.lora.targets if request.lora else (),
    )
    return settings, decisions


def speculative_config(spec: SpeculativeSpec) -> dict[str, Any]:
    """`--speculative-config` as vLLM's SpeculativeConfig reads it; a draft is read offline from the cache."""
    config: dict[str, Any] = {"method": spec.method}
    if spec.model is not None:
        config["model"] = spec.model
    if spec.revision is not None:
        config["revision"] = spec.revision
    for key in _SPECULATIVE_KEYS:
        value = getattr(spec, key)
        if value is not None:
            config[key] = value
    return config


def speculative_settings(
    explicit: Mapping[str, Any], request: DeploymentRequest
) -> SpeculativeSettings | None:
    config = explicit.get("speculative_config")
    if not isinstance(config, Mapping) or "method" not in config:
        return None
    draft_tp = config.get("draft_tensor_parallel_size")
    return SpeculativeSettings(
        method=str(config["method"]),
        num_speculative_tokens=int(config.get("num_speculative_tokens", 1)),
        draft_tp=int(draft_tp) if draft_tp is not None else None,
        draft=request.draft,
    )


def with_side_memory_reasons(plan: DeploymentPlan, arch: ModelArch, settings: VllmSettings) -> DeploymentPlan:
    """The plan with what its LoRA slots and its draft cost per GPU stated in the reasons `plan` shows."""
    notes: dict[str, str] = {}
    if settings.lora is not None:
        lora = settings.lora
        version = settings.version
        slots = lora_slot_bytes(arch, lora, arch.dtype_bytes, settings.tp, settings.pp, version) / GIB
        notes["max_loras"] = (
            f"{lora.max_loras} slot(s) of rank {lora.max_lora_rank} take {slots:.2f} GiB per GPU from the KV "
            "cache"
        )
    spec = settings.speculative
    if spec is not None and spec.method == "mtp" and arch.mtp_layers:
        weights = (
            mtp_weight_bytes(
                arch, settings.tp, settings.expert_parallel, settings.tp * settings.dp, settings.version
            )
            / GIB
        )
        draft = (
            f"the model's {arch.mtp_layers} MTP layer(s) take {weights:.2f} GiB per GPU and one more KV "
            "layer each"
        )
    elif spec is not None:
        weights = draft_weight_bytes(spec, settings.tp) / GIB
        draft = f"draft weights {weights:.2f} GiB per GPU" if spec.draft is not None else "no draft weights"
    if spec is not None:
        notes["speculative_config"] = f"{spec.method}, {spec.num_speculative_tokens} tokens per step; {draft}"
    if not notes:
        return plan
    reasons = [
        replace(d, reason=f"{d.reason}; {notes.pop(d.flag)}") if d.flag in notes else d for d in plan.reasons
    ]
    reasons += [Decision(flag, plan.engine_args.get(flag), note) for flag, note in notes.items()]
    return replace(plan, reasons=tuple(reasons))
