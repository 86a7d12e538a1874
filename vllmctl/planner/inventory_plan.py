"""Plans a whole Inventory: per host and model, GPUs from gathered facts (or the declared ones), a share of
the host's GPUs per model, and a DeploymentPlan or the PlanError that explains why none fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vllmctl.catalog.adapters import AdapterConfig
from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel, custom_gpu, find_gpu, smi_mib_to_cuda_gib
from vllmctl.catalog.loader import resolve_catalog
from vllmctl.errors import InputError, PlanError, VllmctlError
from vllmctl.inventory.model import Host, Inventory, ModelDeployment
from vllmctl.planner.lora import lora_request, speculative_config
from vllmctl.planner.rules.base import HostResources
from vllmctl.planner.types import DeploymentPlan, DeploymentRequest

GpuFacts = tuple[str, int, int]  # (nvidia-smi name, count, memory.total MiB)


@dataclass(frozen=True)
class HostModelPlan:
    host: str
    model: str
    gpu_source: str  # "facts" | "declared"
    gpu_indices: tuple[int, ...]
    plan: DeploymentPlan | None
    error: str = ""
    hint: str = ""
    input_error: bool = False  # the inventory's own flags are what vLLM refuses (exit 2, not 1)
    refused_flags: tuple[str, ...] = ()  # engine_args names vLLM's checks refused

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "model": self.model,
            "gpu_source": self.gpu_source,
            "gpu_indices": list(self.gpu_indices),
            "plan": self.plan.to_json() if self.plan else None,
            "error": self.error or None,
            "hint": self.hint or None,
            "refused_flags": list(self.refused_flags),
        }


@dataclass(frozen=True)
class InventoryPlan:
    entries: tuple[HostModelPlan, ...]

    @property
    def ok(self) -> bool:
        return all(entry.plan is not None for entry in self.entries)

    def failures(self) -> list[HostModelPlan]:
        return [entry for entry in self.entries if entry.plan is None]

    def raise_for_failures(self) -> None:
        """One error for every entry without a plan: an input error (exit 2) when any is the inventory's."""
        failed = self.failures()
        if failed:
            lines = [f"{e.host}/{e.model}: {e.error}" for e in failed]
            hints = [f"{e.host}/{e.model}: {e.hint}" for e in failed if e.hint]
            kind = InputError if any(e.input_error for e in failed) else PlanError
            raise kind("\n".join(lines), "\n  ".join(hints))

    def replica_counts(self) -> dict[tuple[str, str], int]:
        """Engine processes per (host, model) where a plan exists."""
        return {(e.host, e.model): len(e.plan.replicas) for e in self.entries if e.plan is not None}

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "entries": [entry.to_json() for entry in self.entries]}


def host_gpus(host: Host, facts: Mapping[str, GpuFacts] | None) -> tuple[GpuModel, int, str] | None:
    """The GPU kind and count to plan with: gathered facts win over the inventory's declaration."""
    if facts and host.name in facts:
        name, count, smi_mib = facts[host.name]
        known = find_gpu(name)
        if known and known.smi_mib == smi_mib:
            return known, count, "facts"
        cuda = smi_mib_to_cuda_gib(smi_mib, name)
        gpu = replace(known, smi_mib=smi_mib, cuda_gib=cuda) if known else custom_gpu(cuda)
        return gpu, count, "facts"
    if host.gpus is not None:
        known = find_gpu(host.gpus.model)
        return (known, host.gpus.count, "declared") if known else None
    return None


def sampler_for(host: Host) -> str:
    """The top-k/top-p sampler the engine's environment selects (VLLM_USE_FLASHINFER_SAMPLER), else auto."""
    value = host.vars.get("env", {}).get("VLLM_USE_FLASHINFER_SAMPLER")
    if value is None:
        return "auto"
    return "flashinfer" if str(value).strip() not in ("0", "", "false", "False") else "sort"


def model_runner_for(host: Host) -> str:
    """VLLM_USE_V2_MODEL_RUNNER in the engine's environment ("v1" or "v2"), else "auto" (vLLM's choice);
    vLLM reads it as bool(int(value)) (envs.py, maybe_convert_bool), so anything else stops its start."""
    value = host.vars.get("env", {}).get("VLLM_USE_V2_MODEL_RUNNER")
    if value is None:
        return "auto"
    try:
        return "v2" if int(str(value).strip()) else "v1"
    except ValueError:
        raise InputError(
            f"env VLLM_USE_V2_MODEL_RUNNER={value!r} stops vLLM at start: it is read as an integer",
            "set it to 1 (the V2 model runner) or 0 (V1), or leave it out for vLLM's own choice",
        ) from None


def allows_long_context(host: Host) -> bool:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN in the engine's environment, read as vLLM's envs.py reads it."""
    value = str(host.vars.get("env", {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0"))
    return value.strip().lower() in ("1", "true")


def deployment_request(
    model: ModelDeployment,
    host: Host,
    nodes: int = 1,
    resources: HostResources | None = None,
    adapters: Mapping[str, AdapterConfig] | None = None,
    archs: Mapping[str, ModelArch] | None = None,
) -> DeploymentRequest:
    """What the planner is asked for one model on one host, from the inventory (and the host's facts);
    `adapters` holds the adapter configs read so far by source, `archs` the draft's architecture."""
    engine = model.engine or host.engine
    concurrency = model.slo.get("concurrency")
    engine_args = dict(model.engine_args)
    draft = None
    if model.speculative is not None:
        engine_args.setdefault("speculative_config", speculative_config(model.speculative))
        source = model.speculative.model
        draft = ((archs or {}).get(source) or resolve_catalog(source)) if source else None
    configs = [(adapters or {}).get(a.source) for a in model.adapters]
    return DeploymentRequest(
        engine=engine.name,
        engine_version=engine.version,
        profile=model.profile,
        max_model_len=model.max_model_len,
        allow_context_shrink=model.allow_context_shrink,
        tight_fit=model.tight_fit,
        engine_args=engine_args,
        concurrency=float(concurrency) if concurrency else None,
        nodes=nodes,
        base_port=model.port,
        use_case=model.use_case,
        sampling=dict(model.sampling),
        images_per_prompt=model.multimodal.get("images_per_prompt", 1),
        videos_per_prompt=model.multimodal.get("videos_per_prompt", 0),
        workload=model.workload,
        host=resources or HostResources(),
        allow_long_max_model_len=allows_long_context(host),
        sampler=sampler_for(host),
        model_runner=model_runner_for(host),
        lora=lora_request(configs) if model.adapters else None,
        draft=draft,
    )


def _shifted(
    plan: DeploymentPlan, start: int, cache: dict[tuple[int, int], tuple[DeploymentPlan, DeploymentPlan]]
) -> DeploymentPlan:
    """The plan with its replicas moved to the host's GPUs from `start` on (shared hosts)."""
    key = (id(plan), start)
    if key not in cache:  # the value keeps `plan` alive, so its id cannot be reused meanwhile
        moved = tuple(replace(r, gpu_indices=tuple(start + i for i in r.gpu_indices)) for r in plan.replicas)
        cache[key] = (plan, replace(plan, replicas=moved))
    return cache[key][1]


UNKNOWN_ARCH_HINT = "load it with catalog.load_arch (hub or local config.json)"
NO_GPUS_HINT = "declare gpus: {model, count} or gather facts first"


def _unplanned(host: str, model: str, error: str, hint: str) -> HostModelPlan:
    return HostModelPlan(host, model, "", (), None, error, hint)


def plan_inventory(
    inv: Inventory,
    gpu_facts: Mapping[str, GpuFacts] | None = None,
    archs: Mapping[str, ModelArch] | None = None,
    resources: Mapping[str, HostResources] | None = None,
    adapters: Mapping[str, AdapterConfig] | None = None,
) -> InventoryPlan:
    """Every (host, model) pair planned; models sharing a host split its GPUs in inventory order.

    `archs` maps a model's source to its architecture (load them with catalog.load_arch first);
    sources missing from it are looked up in the shipped catalog only, so this stays free of I/O.
    `resources` are what each host's facts say of its memory (vLLM's swap-space and free-memory checks).
    """
    from vllmctl.planner import plan_deployment

    sharing: dict[str, list[str]] = {}
    for model in inv.models.values():
        for host_name in model.hosts:
            sharing.setdefault(host_name, []).append(model.name)
    entries: list[HostModelPlan] = []
    shifted: dict[tuple[int, int], tuple[DeploymentPlan, DeploymentPlan]] = {}
    for model in inv.models.values():
        arch = (archs or {}).get(model.source) or resolve_catalog(model.source)
        for host_name in model.hosts:
            host = inv.hosts[host_name]
            found = host_gpus(host, gpu_facts)
            if arch is None:
                why = f"architecture of {model.source!r} is not known offline"
                entries.append(_unplanned(host_name, model.name, why, UNKNOWN_ARCH_HINT))
                continue
            if found is None:
                entries.append(_unplanned(host_name, model.name, "no GPUs known for this host", NO_GPUS_HINT))
                continue
            gpu, count, source = found
            neighbours = sharing[host_name]
            share = count // len(neighbours)
            start = neighbours.index(model.name) * share
            indices = tuple(range(start, start + share))
            host_resources = (resources or {}).get(host_name)
            request = deployment_request(model, host, len(model.hosts), host_resources, adapters, archs)
            try:
                plan = plan_deployment(arch, gpu, share, request)
            except VllmctlError as exc:
                refused = tuple(sorted({f for r in getattr(exc, "refusals", ()) for f in r.flags}))
                failed = HostModelPlan(host_name, model.name, source, indices, None, exc.message, exc.hint)
                failed = replace(failed, input_error=isinstance(exc, InputError), refused_flags=refused)
                entries.append(failed)
                continue
            if start:
                plan = _shifted(plan, start, shifted)
            entries.append(HostModelPlan(host_name, model.name, source, indices, plan))
    return InventoryPlan(tuple(entries))
