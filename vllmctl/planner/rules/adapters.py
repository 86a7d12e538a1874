"""vLLM's checks on LoRA and speculative decoding: supported ranks, adapters within max_lora_rank, CPU
slots at least GPU slots, the draft methods and draft TP vLLM runs, EAGLE-3's targets, equal vocabularies.
"""

from __future__ import annotations

from vllmctl.planner.rules.base import RuleInput, Violation

# vllm/config/lora.py:104-109 (LoRAConfig.__post_init__)
SUPPORTED_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
# vllm/config/speculative.py:540-547 (SpeculativeConfig._verify_args)
EAGLE3_TARGETS = ("llama", "qwen", "minicpm", "gpt_oss")


def lora_rank_supported(given: RuleInput) -> Violation | None:
    lora = given.settings.lora
    if lora is None or lora.max_lora_rank in SUPPORTED_RANKS:
        return None
    above = [r for r in SUPPORTED_RANKS if r >= lora.max_lora_rank]
    return Violation(
        f"max_lora_rank ({lora.max_lora_rank}) must be one of {SUPPORTED_RANKS}.",
        "vLLM's LoRA kernels are built for a fixed set of ranks",
        f"max_lora_rank: {above[0]}" if above else "an adapter of rank 512 or less",
    )


def adapters_within_rank(given: RuleInput) -> Violation | None:
    lora = given.settings.lora
    if lora is None or not lora.adapter_ranks or max(lora.adapter_ranks) <= lora.max_lora_rank:
        return None
    largest = max(lora.adapter_ranks)
    fit = next((r for r in SUPPORTED_RANKS if r >= largest), None)
    return Violation(
        f"LoRA rank {largest} is greater than max_lora_rank {lora.max_lora_rank}.",
        "every slot is sized for max_lora_rank: a declared adapter of a larger rank is refused when the "
        "server loads it at startup",
        f"max_lora_rank: {fit}" if fit else "retrain the adapter at rank 512 or less",
    )


def cpu_loras_cover_gpu_loras(given: RuleInput) -> Violation | None:
    lora = given.settings.lora
    if lora is None:
        return None
    if lora.max_loras < 1:
        return Violation(
            f"max_loras ({lora.max_loras}) must be >= 1.", "LoRA needs at least one GPU slot", "max_loras: 1"
        )
    if lora.max_cpu_loras is None or lora.max_cpu_loras >= lora.max_loras:
        return None
    return Violation(
        f"max_cpu_loras ({lora.max_cpu_loras}) must be >= max_loras ({lora.max_loras})",
        "every adapter in a GPU slot is also held in the CPU cache",
        f"max_cpu_loras at least {lora.max_loras}, or leave it out (it defaults to max_loras)",
    )


def draft_model_method_runs(given: RuleInput) -> Violation | None:
    spec = given.settings.speculative
    if spec is None or spec.method != "draft_model":
        return None
    return Violation(
        "Speculative decoding with draft model is not supported yet. Please consider using other speculative "
        "decoding methods such as ngram, medusa, eagle, or mtp.",
        "the V1 engine of this vLLM version has no proposer for a separate draft model",
        "method: eagle or eagle3 with a draft head trained for this model, ngram, or mtp where the model "
        "has MTP layers",
    )


# vllm/config/speculative.py:148-200 (hf_config_override): the targets whose MTP layers vLLM can load
MTP_TARGETS = frozenset(
    {"deepseek_v3", "deepseek_v32", "deepseek_mtp", "mimo", "glm4_moe", "ernie4_5_moe", "ernie_mtp",
     "qwen3_next", "qwen3_next_mtp", "longcat_flash"}
)  # fmt: skip


def mtp_target_has_mtp_layers(given: RuleInput) -> Violation | None:
    spec = given.settings.speculative
    if spec is None or spec.method != "mtp" or given.arch.model_type in MTP_TARGETS:
        return None
    return Violation(
        "Speculative decoding with draft model is not supported yet. Please consider using other speculative "
        "decoding methods such as ngram, medusa, eagle, or mtp.",
        f"method mtp reuses the model's own multi-token-prediction layers, and vLLM knows none for "
        f"{given.arch.model_type}: it then takes the model as a separate draft, which it does not run",
        "method: ngram, or eagle with a draft head trained for this model",
    )


def draft_tp_one_or_target(given: RuleInput) -> Violation | None:
    spec = given.settings.speculative
    tp = given.settings.tp
    if spec is None or spec.draft_tp is None or spec.draft_tp in (1, tp):
        return None
    return Violation(
        f"speculative_draft_tensor_parallel_size={spec.draft_tp} cannot be other value than 1 or target "
        "model tensor_parallel_size",
        "the draft runs either on one GPU or sharded exactly like the target",
        f"draft_tensor_parallel_size: 1 or {tp}",
    )


def eagle3_target_supported(given: RuleInput) -> Violation | None:
    spec = given.settings.speculative
    model_type = given.arch.model_type
    if spec is None or spec.method != "eagle3" or any(t in model_type for t in EAGLE3_TARGETS):
        return None
    return Violation(
        f"Eagle3 is only supported for {list(EAGLE3_TARGETS)} models. Got "
        f"self.target_model_config.hf_text_config.model_type='{model_type}'",
        "EAGLE-3 reads auxiliary hidden states that only these model implementations expose",
        "method: eagle (EAGLE-1 head) or ngram",
    )


def draft_vocab_matches(given: RuleInput) -> Violation | None:
    spec = given.settings.speculative
    if spec is None or spec.draft is None or spec.draft.vocab_size == given.arch.vocab_size:
        return None
    return Violation(
        f"the draft's vocab_size ({spec.draft.vocab_size}) differs from the target's "
        f"({given.arch.vocab_size})",
        "proposed tokens are verified by their ids: the draft shares the target's tokenizer and vocabulary "
        "(a draft head's embedding and lm_head shapes are the target's)",
        "a draft (or draft head) trained for this model's tokenizer",
    )
