"""LoRA for one deployment, pure: max_loras and max_lora_rank chosen from the declared adapters' configs, and
the GPU memory vLLM reserves for the adapter slots (vllm/lora/models.py, LoRAModelManager)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllmctl.catalog.adapters import AdapterConfig
from vllmctl.catalog.arch import ModelArch

# vllm/config/lora.py:98 (LoRAConfig.__post_init__): the only ranks vLLM accepts for max_lora_rank
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


def smallest_supported_rank(rank: int) -> int | None:
    return next((r for r in SUPPORTED_RANKS if r >= rank), None)


def choose_lora(configs: Sequence[AdapterConfig | None]) -> LoraChoice:
    """One slot per declared adapter (all can serve in one batch), the rank the largest adapter needs.
    An adapter whose config could not be read counts at vLLM's default rank."""
    ranks = [c.rank if c is not None else DEFAULT_MAX_LORA_RANK for c in configs]
    largest = max(ranks, default=DEFAULT_MAX_LORA_RANK)
    rank = smallest_supported_rank(largest) or largest  # an unsupported rank is refused by the rules
    count = max(len(configs), DEFAULT_MAX_LORAS)
    reasons = {
        "max_loras": f"{count} declared adapter(s), each with a GPU slot so all serve in the same batch",
        "max_lora_rank": f"the largest adapter rank is {largest}; {rank} is the smallest rank vLLM accepts "
        f"at or above it ({', '.join(map(str, SUPPORTED_RANKS))})",
    }
    return LoraChoice(count, rank, reasons)


# Projection name -> (in features, out features) per layer for a decoder with this architecture.
def module_shapes(arch: ModelArch) -> dict[str, tuple[int, int]]:
    hidden, heads, kv_heads, head_dim = arch.hidden_size, arch.num_heads, arch.num_kv_heads, arch.head_dim
    inter = arch.intermediate_size
    return {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def lora_slot_bytes(
    arch: ModelArch, max_loras: int, max_lora_rank: int, targets: Sequence[str], dtype_bytes: int, tp: int = 1
) -> float:
    """Bytes per GPU of the stacked LoRA A/B buffers vLLM allocates at startup: for every targeted module in
    every layer, max_loras × (rank × in + out × rank) in the LoRA dtype (the model's by default). Column-
    parallel B (and row-parallel A) are split by TP; the other factor is replicated."""
    shapes = module_shapes(arch)
    wanted = set(shapes) if not targets or "all-linear" in targets else {t for t in targets if t in shapes}
    per_layer = 0.0
    for name in wanted:
        in_features, out_features = shapes[name]
        if name in ("o_proj", "down_proj"):  # row parallel: A split, B whole
            per_layer += max_lora_rank * in_features / tp + out_features * max_lora_rank
        else:  # column parallel: A whole, B split
            per_layer += max_lora_rank * in_features + out_features * max_lora_rank / tp
    return per_layer * arch.num_layers * max_loras * dtype_bytes
