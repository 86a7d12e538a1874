"""How the vLLM planner applies vLLM's startup rules: a refusal no candidate can avoid is the user's flag
(exit 2) or the model and GPU themselves (exit 1); refusals that depend on the planner's choices filter its
search.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.errors import InputError, PlanError
from vllmctl.planner.rules import RULES, Refusal, refusals
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.vllm_memory import MemoryBreakdown

# Flags the vLLM planner chooses itself unless the inventory sets them.
PLANNER_CHOSEN = frozenset(
    {"tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "enforce_eager",
     "compilation_config", "enable_expert_parallel", "gpu_memory_utilization", "max_num_seqs",
     "max_num_batched_tokens", "dtype", "swap_space"}
)  # fmt: skip
MEMORY_RULES = frozenset(rule.name for rule in RULES if rule.needs_memory)


def _said(model: str, found: Iterable[Refusal]) -> str:
    return "\n".join(f"{model}: vLLM refuses to start ({r.rule}): {r.message}" for r in found)


def _fixes(found: Iterable[Refusal]) -> str:
    return "\n  ".join(f"{r.reason}; fix: {r.fix}" for r in found)


class RefusedFlagsError(InputError):
    """Engine flags the user set that vLLM refuses at startup; nothing was touched."""

    def __init__(self, model: str, found: list[Refusal]) -> None:
        super().__init__(_said(model, found), _fixes(found))
        self.refusals = found


class RefusedModelError(PlanError):
    """The model cannot start on this GPU whatever the flags (a quantization the GPU lacks, ...)."""

    def __init__(self, model: str, found: list[Refusal]) -> None:
        super().__init__(_said(model, found), _fixes(found))
        self.refusals = found


@dataclass(frozen=True)
class Guard:
    """The rules for one deployment: the flags the user set decide whose mistake a refusal is."""

    arch: ModelArch
    gpu: GpuModel
    gpu_count: int
    explicit: frozenset[str]
    host: HostResources = field(default_factory=HostResources)
    nodes: int = 1
    chosen: frozenset[str] = PLANNER_CHOSEN  # flags the caller may still change to avoid a refusal

    def refusals(self, settings: VllmSettings, memory: MemoryBreakdown | None = None) -> list[Refusal]:
        return refusals(self.arch, self.gpu, self.gpu_count, settings, self.host, memory, self.nodes)

    def check_flags(self, settings: VllmSettings) -> None:
        """Raises for a refusal the planner's choices cannot avoid: the user's (exit 2) or the model's (1)."""
        free = self.chosen - self.explicit
        stuck = [r for r in self.refusals(settings) if not set(r.flags) & free]
        users = [r for r in stuck if set(r.flags) & self.explicit]
        if users:
            raise RefusedFlagsError(self.arch.name, users)
        if stuck:
            raise RefusedModelError(f"{self.arch.name} on {self.gpu.name}", stuck)

    def static_ok(self, settings: VllmSettings) -> bool:
        return not self.refusals(settings)

    def memory_refusals(self, settings: VllmSettings, memory: MemoryBreakdown) -> list[Refusal]:
        return [r for r in self.refusals(settings, memory) if r.rule in MEMORY_RULES]
