"""The planner's inputs and outputs: what a deployment asks for, and the plan with a reason per decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from vllmctl.catalog.arch import ModelArch
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.sglang_memory import SglangMemory
from vllmctl.planner.vllm_memory import MemoryBreakdown

Profile = Literal["throughput", "latency", "balanced", "memory-saver"]
PROFILES: tuple[str, ...] = ("throughput", "latency", "balanced", "memory-saver")


@dataclass(frozen=True)
class LoraRequest:
    """The adapters a deployment declares, as the planner sizes them: each one's rank and targeted modules."""

    ranks: tuple[int, ...]
    targets: tuple[str, ...] = ()
    unknown: int = 0  # adapters whose config could not be read here (counted at vLLM's default rank)


@dataclass(frozen=True)
class DeploymentRequest:
    """What one model deployment asks of the GPUs it is given (from the inventory or the CLI)."""

    engine: str = "vllm"
    engine_version: str = "0.11.0"
    profile: Profile = "balanced"
    max_model_len: int | None = None
    allow_context_shrink: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    concurrency: float | None = None  # full-length requests each replica must hold at once
    nodes: int = 1  # hosts this deployment may span (pipeline parallel only when one cannot hold it)
    base_port: int = 8000
    use_case: str | None = None  # default sampling preset (presets.USE_CASES)
    sampling: dict[str, Any] = field(default_factory=dict)  # explicit sampling values; win over use_case
    images_per_prompt: int = 1  # vision-language models only
    videos_per_prompt: int = 0
    workload: str = "independent"  # or shared_prefix
    host: HostResources = field(default_factory=HostResources)  # host memory and GPU memory in use (facts)
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the engine's environment
    sampler: str = "auto"  # VLLM_USE_FLASHINFER_SAMPLER in the engine's environment: flashinfer | sort
    model_runner: str = "auto"  # VLLM_USE_V2_MODEL_RUNNER in the engine's environment: v1 | v2
    tight_fit: bool = False  # accept a fit that holds only at the optimistic edge of the prediction's error
    lora: LoraRequest | None = None  # declared LoRA adapters
    draft: ModelArch | None = None  # the speculative draft's architecture, when it has one


@dataclass(frozen=True)
class Decision:
    flag: str
    value: Any
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class Replica:
    """One engine process: the GPUs it owns (per node) and its port."""

    index: int
    gpu_indices: tuple[int, ...]
    port: int
    port_offset: int
    nodes: tuple[int, ...] = (0,)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "gpu_indices": list(self.gpu_indices),
            "port": self.port,
            "port_offset": self.port_offset,
            "nodes": list(self.nodes),
        }


@dataclass(frozen=True)
class DeploymentPlan:
    model: str
    engine: str
    engine_version: str
    gpu: str
    gpu_count: int
    profile: str
    engine_args: dict[str, Any]
    replicas: tuple[Replica, ...]
    memory: MemoryBreakdown | SglangMemory
    reasons: tuple[Decision, ...]
    warnings: tuple[str, ...] = ()
    guessed: tuple[tuple[str, int], ...] = ()  # config fields no known class gives (catalog/guessed.py)

    def reason_for(self, flag: str) -> Decision | None:
        return next((d for d in self.reasons if d.flag == flag), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "profile": self.profile,
            "engine_args": dict(self.engine_args),
            "replicas": [r.to_json() for r in self.replicas],
            "memory": self.memory.to_json(),
            "reasons": [d.to_json() for d in self.reasons],
            "warnings": list(self.warnings),
            "guessed": dict(self.guessed),
        }
