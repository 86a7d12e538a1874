"""Default sampling per use case, from the serving guides, as each engine's server-side defaults:
vLLM `--override-generation-config`, SGLang `--preferred-sampling-params`; each with its reason. Also the
plan for a CPU build of an engine: only the guide decisions that do not size GPU memory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.planner.multimodal import resolved_limits
from vllmctl.planner.tuning import normalize_args
from vllmctl.planner.types import Decision, DeploymentRequest
from vllmctl.planner.versions import parse_version

# (values, why) per use case. Temperature 0 is greedy: top_p no longer matters, so it is left alone.
USE_CASES: dict[str, tuple[dict[str, float], str]] = {
    "code": (
        {"temperature": 0.0, "repetition_penalty": 1.0},
        "greedy decoding gives the single most likely completion and the same text for the same prompt; "
        "code repeats identifiers legitimately, so no repetition penalty",
    ),
    "factual": (
        {"temperature": 0.1, "repetition_penalty": 1.0},
        "0.1 stays next to the most likely answer while breaking the ties that make greedy decoding loop; "
        "no repetition penalty so names and figures can recur",
    ),
    "summarization": (
        {"temperature": 0.3, "repetition_penalty": 1.1},
        "low temperature keeps the summary faithful to the source; a light penalty stops the restating "
        "that long inputs invite",
    ),
    "translation": (
        {"temperature": 0.2, "repetition_penalty": 1.1},
        "translation has one right answer more often than summaries, so the low end of 0.2-0.5; "
        "a light penalty stops repeated phrases",
    ),
    "chat": (
        {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1},
        "0.7 with nucleus 0.9 varies replies without drifting; 1.1 discourages repeating earlier turns",
    ),
    "creative": (
        {"temperature": 1.0, "top_p": 0.95, "repetition_penalty": 1.0},
        "the model's own distribution (temperature 1.0) with a 0.95 nucleus that trims only the "
        "unlikely tail; only top_p moves, as the guides advise changing one of the two",
    ),
}

# What each engine applies as a server-side default, and under which key.
ENGINE_KEYS: dict[str, dict[str, str]] = {
    # vLLM's ModelConfig.get_diff_sampling_param reads only these from the generation config.
    "vllm": {
        "temperature": "temperature",
        "top_p": "top_p",
        "top_k": "top_k",
        "repetition_penalty": "repetition_penalty",
        "max_tokens": "max_new_tokens",
    },
    # SGLang builds SamplingParams(**preferred_sampling_params) under each request's own values.
    "sglang": {
        "temperature": "temperature",
        "top_p": "top_p",
        "top_k": "top_k",
        "repetition_penalty": "repetition_penalty",
        "presence_penalty": "presence_penalty",
        "frequency_penalty": "frequency_penalty",
        "max_tokens": "max_new_tokens",
    },
}
DEFAULTS_FLAG = {"vllm": "override_generation_config", "sglang": "preferred_sampling_params"}
SEED_FLAG = {"vllm": "seed", "sglang": "random_seed"}


@dataclass(frozen=True)
class SamplingPlan:
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...]


def _as_mapping(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def sampling_plan(
    engine: str, use_case: str | None, sampling: Mapping[str, Any], explicit: Mapping[str, Any]
) -> SamplingPlan:
    """The default-sampling flag (and seed) for one deployment: explicit engine_args > sampling > use_case."""
    preset, preset_why = USE_CASES.get(use_case or "", ({}, ""))
    wanted: dict[str, Any] = {**preset, **sampling}
    keys = ENGINE_KEYS[engine]
    flag = DEFAULTS_FLAG[engine]
    warnings: list[str] = []
    decisions: list[Decision] = []
    values = {keys[name]: value for name, value in wanted.items() if name in keys}
    dropped = sorted(name for name in wanted if name not in keys and name != "seed")
    if dropped:
        warnings.append(
            f"sampling {', '.join(dropped)}: {engine} has no server-side default for "
            f"{'it' if len(dropped) == 1 else 'them'}; clients must send "
            f"{'it' if len(dropped) == 1 else 'them'} per request"
        )
    given = _as_mapping(explicit.get(flag)) if flag in explicit else None
    if flag in explicit:
        clash = sorted(k for k, v in values.items() if given is not None and k in given and given[k] != v)
        if clash:
            warnings.append(
                f"engine_args {flag} overrides sampling/use_case for {', '.join(clash)} "
                f"({', '.join(f'{k} {given[k]} instead of {values[k]}' for k in clash if given)})"
            )
        decisions.append(Decision(flag, explicit[flag], "explicit; wins over use_case and sampling"))
    elif values:
        source = [f"use_case {use_case}: {preset_why}"] if preset else []
        chosen = sorted(set(sampling) & set(keys))
        if chosen:
            source.append(f"sampling sets {', '.join(chosen)} explicitly (wins over use_case)")
        decisions.append(Decision(flag, dict(sorted(values.items())), "; ".join(source)))
    if "seed" in sampling:
        seed_flag = SEED_FLAG[engine]
        if seed_flag in explicit:
            decisions.append(Decision(seed_flag, explicit[seed_flag], "explicit; wins over sampling.seed"))
        else:
            decisions.append(
                Decision(
                    seed_flag,
                    sampling["seed"],
                    "sampling.seed: the engine-wide random seed, so a restart replays the same random "
                    "stream; requests that must repeat exactly still send their own seed",
                )
            )
    final = given if given is not None else values
    temperature, top_p = final.get("temperature"), final.get("top_p")
    if (
        {"temperature", "top_p"} & set(sampling)
        and temperature not in (None, 0, 1)
        and top_p not in (None, 1)
    ):
        warnings.append(
            f"sampling changes both temperature ({temperature}) and top_p ({top_p}); the guides advise "
            "tuning one of them and leaving the other at 1"
        )
    return SamplingPlan(tuple(decisions), tuple(warnings))


@dataclass(frozen=True)
class CpuEnginePlan:
    """A deployment on a CPU build of its engine: the engine sizes its own memory (vLLM-CPU from
    VLLM_CPU_KVCACHE_SPACE), so only the decisions that hold on any device are made."""

    engine: str
    engine_version: str
    port: int
    decisions: tuple[Decision, ...]
    warnings: tuple[str, ...]

    def engine_args(self, explicit: Mapping[str, Any]) -> dict[str, Any]:
        """The inventory's engine_args as written, plus each decision they do not already make."""
        given = normalize_args(dict(explicit))
        added = {d.flag: d.value for d in self.decisions if d.flag not in given}
        args = {**explicit, **added}
        limits = next((d for d in self.decisions if d.flag == "limit_mm_per_prompt"), None)
        if limits is not None and isinstance(limits.value, dict):  # every modality written out, as it runs
            args = {k: v for k, v in args.items() if normalize_args({k: v}).keys() != {"limit_mm_per_prompt"}}
            args["limit_mm_per_prompt"] = limits.value
        return args

    def to_json(self) -> dict[str, Any]:
        return {
            "device": "cpu",
            "engine": self.engine,
            "engine_version": self.engine_version,
            "replicas": [{"index": 0, "gpu_indices": [], "port": self.port}],
            "reasons": [d.to_json() for d in self.decisions],
            "warnings": list(self.warnings),
        }


def cpu_engine_plan(request: DeploymentRequest, arch: ModelArch | None) -> CpuEnginePlan:
    """Sampling defaults (both engines), vLLM's multimodal limits and SGLang's schedule policy.

    `arch` is None when the model's config could not be read; only the multimodal limit needs it.
    """
    explicit = normalize_args(request.engine_args)
    sampling = sampling_plan(request.engine, request.use_case, request.sampling, explicit)
    decisions = list(sampling.decisions)
    warnings = list(sampling.warnings)
    if request.engine == "sglang":
        decisions.append(_schedule_policy(request.workload, explicit))
    else:
        media, notes = _media_limits(request, arch, explicit)
        decisions += [media] if media else []
        warnings += notes
    return CpuEnginePlan(
        request.engine, request.engine_version, request.base_port, tuple(decisions), tuple(warnings)
    )


def _schedule_policy(workload: str, explicit: Mapping[str, Any]) -> Decision:
    if "schedule_policy" in explicit:
        return Decision("schedule_policy", explicit["schedule_policy"], "explicit")
    if workload == "shared_prefix":
        return Decision(
            "schedule_policy",
            "lpm",
            "workload shared_prefix: longest-prefix-match runs requests that share cached prefixes "
            "together, raising radix-cache hits (on any device)",
        )
    return Decision(
        "schedule_policy",
        "fcfs",
        "independent requests gain nothing from prefix ordering; first-come-first-served is fair and "
        "cheaper than sorting the queue each step",
    )


def _media_limits(
    request: DeploymentRequest, arch: ModelArch | None, explicit: Mapping[str, Any]
) -> tuple[Decision | None, list[str]]:
    asked = (request.images_per_prompt, request.videos_per_prompt) != (1, 0)
    if arch is None:
        unread = "multimodal is set but the model's config could not be read; not applied"
        return None, [unread] if asked else []
    if arch.vision is None:
        return None, [f"multimodal is set but {arch.name} has no vision encoder; ignored"] if asked else []
    cpu = "the CPU build sizes its own memory, so no encoder memory is planned"
    if "limit_mm_per_prompt" in explicit:
        given = explicit["limit_mm_per_prompt"]
        if isinstance(given, dict):  # a modality left out runs at the release's default: written out
            given = resolved_limits(arch, parse_version(request.engine_version), given)
        return Decision("limit_mm_per_prompt", given, f"explicit; {cpu}"), []
    limits = {"image": request.images_per_prompt, "video": request.videos_per_prompt}
    source = "multimodal" if asked else "default: 1 image, no video (set multimodal: to allow more)"
    return Decision("limit_mm_per_prompt", limits, f"{source}; {cpu}"), []
