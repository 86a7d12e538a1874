"""GPU memory of LoRA slots, a speculative draft and an MTP module, pure, per GPU: what vLLM allocates beside
the weights (vllm/lora/models.py LoRAModelManager; v1/worker/gpu_model_runner.py loading the drafter)."""

from __future__ import annotations

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.params import stage_linears
from vllmctl.planner.settings import LoraSettings, SpeculativeSettings
from vllmctl.planner.versions import Version
from vllmctl.planner.weights import linear_bytes, stage_weight_bytes

ROW_PARALLEL = frozenset({"o_proj", "down_proj"})  # input split by TP: LoRA A is split, B is whole
# Models whose vLLM class lists embed_tokens and lm_head as LoRA embedding modules (llama.py:493-497; Qwen2
# and Qwen3 list none): those get embedding and logits slots too.
EMBEDDING_LORA_TYPES = frozenset({"llama", "mistral"})
# Before 0.12 those slots held 256 extra vocabulary rows (LoRAConfig.lora_extra_vocab_size) and the logits
# slot the vocabulary padded to 256 (lora_vocab_padding_size); 0.12 removed both (lora/layers/
# vocal_parallel_embedding.py and logits_processor.py size them by the model's own vocabulary).
EXTRA_VOCAB = 256
VOCAB_PADDING = 256
EXTRA_VOCAB_UNTIL: Version = (0, 12, 0)


def module_shapes(arch: ModelArch) -> dict[str, tuple[int, int]]:
    """(in features, out features) of each decoder-layer projection LoRA can target."""
    hidden, head_dim = arch.hidden_size, arch.head_dim
    inter = (
        arch.moe_intermediate_size if arch.is_moe and not arch.intermediate_size else arch.intermediate_size
    )
    return {
        "q_proj": (hidden, arch.num_heads * head_dim),
        "k_proj": (hidden, arch.num_kv_heads * head_dim),
        "v_proj": (hidden, arch.num_kv_heads * head_dim),
        "o_proj": (arch.num_heads * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def lora_slot_bytes(
    arch: ModelArch,
    lora: LoraSettings,
    dtype_bytes: int,
    tp: int = 1,
    pp: int = 1,
    version: Version = (0, 11, 0),
) -> float:
    """The stacked A/B buffers of `max_loras` slots of `max_lora_rank` on one GPU, in the LoRA dtype (the
    model's). vLLM gives every LoRA-capable layer a slot whatever the adapters target (lora/models.py:606,
    `_match_target_modules` reads the model's supported modules): per projection per layer rank × in +
    out × rank, the parallel side split by TP; plus the embedding and logits slots where the model has them
    (vocal_parallel_embedding.py:50-76, logits_processor.py:91-110)."""
    per_layer = 0.0
    rank = lora.max_lora_rank
    for name, (in_features, out_features) in module_shapes(arch).items():
        if name in ROW_PARALLEL:
            per_layer += rank * in_features / tp + out_features * rank
        else:
            per_layer += rank * in_features + out_features * rank / tp
    layers = -(-arch.num_layers // pp)
    per_slot = per_layer * layers
    if arch.model_type in EMBEDDING_LORA_TYPES:
        hidden, vocab = arch.hidden_size, arch.vocab_size
        extra, padded = 0, vocab
        if version < EXTRA_VOCAB_UNTIL:
            extra, padded = EXTRA_VOCAB, -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
        per_slot += extra * hidden + (vocab + extra) * rank + hidden * rank  # embedding
        per_slot += rank * hidden + padded * rank  # logits (lm_head)
    return per_slot * lora.max_loras * dtype_bytes


def draft_weight_bytes(spec: SpeculativeSettings, target_tp: int) -> float:
    """The draft model's (or head's) weights on one GPU at its TP (1 or the target's, vLLM's default)."""
    if spec.draft is None:
        return 0.0
    tp = spec.draft_tp or target_tp
    return float(stage_weight_bytes(spec.draft, tp, 1)[0])


# v1/spec_decode/eagle.py from 0.16 replaces each MTP layer's shared_head.head with the target's lm_head;
# before, the MTP module kept the head it loaded.
MTP_SHARES_HEAD_SINCE: Version = (0, 16, 0)


def mtp_weight_bytes(
    arch: ModelArch, tp: int, ep: bool = False, ep_ranks: int = 0, version: Version = (0, 11, 0)
) -> float:
    """`method: mtp`'s module on one GPU (model_executor/models/deepseek_mtp.py): per predicted layer a
    decoder layer shaped like the model's last, a SharedHead (norm, and before 0.16 its own LM head split
    by TP), and enorm, hnorm and eh_proj, an nn.Linear(2 x hidden, hidden) whole on every rank; the embedding
    is the target's (v1/spec_decode/eagle.py shares it when PP is 1). Public 0.20-0.23 pairs (Qwen3.6, tests/
    unit/planner/data/mtp_startup_logs.jsonl) load exactly one decoder layer and eh_proj more."""
    if arch.mtp_layers == 0:
        return 0.0
    last = arch.num_layers - 1
    own_head = version < MTP_SHARES_HEAD_SINCE
    parts = stage_linears(arch, tp, last, last + 1, embed=False, head=own_head, ep=ep, ep_ranks=ep_ranks)
    layer = sum(linear_bytes(part, arch.quantization, arch.dtype_bytes) for part in parts)
    hidden = arch.hidden_size
    own = (2 * hidden * hidden + 2 * hidden) * arch.dtype_bytes
    return float(arch.mtp_layers * (layer + own))
