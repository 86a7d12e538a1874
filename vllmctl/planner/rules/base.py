"""What a startup rule is: one of vLLM's own checks as data (its name, where it lives in vLLM's source, the
versions it applies to, the flags it constrains) and the refusal it gives, in vLLM's words and ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import Version, format_version
from vllmctl.planner.vllm_memory import MemoryBreakdown


@dataclass(frozen=True)
class HostResources:
    """What a host's facts say beyond its GPUs; None where unknown (the rule that needs it is skipped)."""

    ram_gib: float | None = None
    gpu_used_gib: float | None = None  # memory other processes already hold on each GPU
    triton_kernels: tuple[str, ...] = ()  # vLLM versions whose venv on the host has triton_kernels


@dataclass(frozen=True)
class RuleInput:
    """One candidate start: the model, the GPUs it gets on one node, the engine arguments, the host."""

    arch: ModelArch
    gpu: GpuModel
    gpu_count: int
    settings: VllmSettings
    host: HostResources = field(default_factory=HostResources)
    memory: MemoryBreakdown | None = None  # only the memory rules read it
    nodes: int = 1  # hosts one engine may span (a multi_node group)

    @property
    def cc(self) -> int:
        """Compute capability as vLLM compares it (major * 10 + minor)."""
        major, minor = self.gpu.compute_capability
        return major * 10 + minor


@dataclass(frozen=True)
class Violation:
    """What a rule's check found: vLLM's message, our reason, and the nearest valid choices."""

    message: str
    reason: str
    fix: str
    flags: tuple[str, ...] | None = None  # the flags behind this violation when fewer than the rule's


@dataclass(frozen=True)
class Refusal:
    """A rule broken by one candidate; `flags` are the engine flags that could change the outcome."""

    rule: str
    flags: tuple[str, ...]
    message: str
    reason: str
    fix: str
    source: str

    def render(self) -> str:
        return f"vLLM refuses this ({self.rule}): {self.message}\n  why: {self.reason}\n  fix: {self.fix}"

    def to_json(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "flags": list(self.flags),
            "message": self.message,
            "reason": self.reason,
            "fix": self.fix,
            "source": self.source,
        }


Check = Callable[[RuleInput], Violation | None]


@dataclass(frozen=True)
class Rule:
    """One of vLLM's startup checks. `source` names the file, lines and function in vLLM 0.11.0; `since` and
    `until` bound the versions that have it (until is the first version without it)."""

    name: str
    summary: str
    source: str
    flags: tuple[str, ...]
    check: Check
    since: Version = (0, 0, 0)
    until: Version | None = None
    needs_memory: bool = False
    version_note: str = ""  # how the check itself changes across the versions it applies to
    needs_host: str = ""  # the HostResources figure the check reads; unknown (no facts): unchecked

    def applies(self, version: Version) -> bool:
        return version >= self.since and (self.until is None or version < self.until)

    def run(self, given: RuleInput) -> Refusal | None:
        if not self.applies(given.settings.version):
            return None
        if self.needs_memory and given.memory is None:
            return None
        found = self.check(given)
        if found is None:
            return None
        flags = self.flags if found.flags is None else found.flags
        return Refusal(self.name, flags, found.message, found.reason, found.fix, self.source)

    def unchecked(self, version: Version, host: HostResources) -> bool:
        """The rule applies to this release but the host figure it reads is unknown, so it was not run."""
        return bool(self.needs_host) and self.applies(version) and getattr(host, self.needs_host) is None

    @property
    def versions(self) -> str:
        low = format_version(self.since) if self.since != (0, 0, 0) else "all"
        if self.until is None:
            text = f"{low} and later" if low != "all" else "all versions"
        else:
            high = format_version(self.until)
            text = f"{low} to before {high}" if low != "all" else f"before {high}"
        return f"{text}; {self.version_note}" if self.version_note else text
