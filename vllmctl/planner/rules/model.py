"""The model's own architecture against the engine release: vLLM refuses a model class its registry lacks."""

from __future__ import annotations

from vllmctl.planner.rules.base import RuleInput, Violation
from vllmctl.planner.versions import Version, format_version

ENGINE_RELEASE_FLAG = "version"  # engine.version (estimate: --engine-version), always the user's choice

# The first release whose vllm/model_executor/models/registry.py lists the class, read from the PyPI wheels of
# the release before and the release itself (0.6.5/0.6.6, 0.7.1/0.7.2, 0.8.3/0.8.4, 0.10.0/0.10.1,
# 0.10.1.1/0.10.2, 0.10.2/0.11.0). Classes missing here are older than 0.6.5 or unknown: never refused.
ARCHITECTURE_SINCE: dict[str, Version] = {
    "DeepseekV3ForCausalLM": (0, 6, 6),
    # Gemma 3 from public threads, not the wheels: 0.7.3 refuses gemma3 (ms-swift#3660), and vllm#14971 tags
    # its multimodal class for "the 0.8.0 release" (V0 only there); BentoVLLM#111 waited for 0.8.0
    "Gemma3ForCausalLM": (0, 8, 0),
    "Gemma3ForConditionalGeneration": (0, 8, 0),
    "Qwen2_5_VLForConditionalGeneration": (0, 7, 2),
    "Qwen3ForCausalLM": (0, 8, 4),
    "Qwen3MoeForCausalLM": (0, 8, 4),
    "GptOssForCausalLM": (0, 10, 1),
    "SeedOssForCausalLM": (0, 10, 2),
    "Qwen3NextForCausalLM": (0, 10, 2),
    "Qwen3VLForConditionalGeneration": (0, 11, 0),
    "Qwen3VLMoeForConditionalGeneration": (0, 11, 0),
}


def architecture_in_registry(given: RuleInput) -> Violation | None:
    # vllm/model_executor/models/registry.py (_ModelRegistry._raise_for_unsupported)
    name = given.arch.architecture
    since = ARCHITECTURE_SINCE.get(name)
    if since is None or given.settings.version >= since:
        return None
    return Violation(
        f"Model architectures ['{name}'] are not supported for now.",
        f"{name} first appears in vLLM {format_version(since)}'s model registry; the engine is "
        f"{format_version(given.settings.version)}",
        f"engine version {format_version(since)} or later",
    )
