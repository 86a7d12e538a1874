"""GPU memory of LoRA slots and of a speculative draft, pure, per GPU: what vLLM allocates beside the weights
(vllm/lora/models.py LoRAModelManager; v1/worker/gpu_model_runner.py loading the drafter)."""

from __future__ import annotations

from vllmctl.catalog.arch import ModelArch
from vllmctl.planner.settings import LoraSettings, SpeculativeSettings
from vllmctl.planner.weights import stage_weight_bytes

ROW_PARALLEL = frozenset({"o_proj", "down_proj"})  # input split by TP: LoRA A is split, B is whole


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


def targeted(arch: ModelArch, targets: tuple[str, ...]) -> list[str]:
    """The modules the slots cover: vLLM allocates a slot on every LoRA-capable layer whatever the adapters
    target, so nothing narrower than all of them is planned unless the targets name only known modules."""
    shapes = module_shapes(arch)
    if not targets or any(t not in shapes for t in targets):
        return sorted(shapes)
    return sorted(set(targets))


def lora_slot_bytes(arch: ModelArch, lora: LoraSettings, dtype_bytes: int, tp: int = 1, pp: int = 1) -> float:
    """The stacked A/B buffers of `max_loras` slots of `max_lora_rank` on one GPU, in the LoRA dtype (the
    model's): per targeted module per layer, rank × in + out × rank, the parallel side split by TP."""
    per_layer = 0.0
    shapes = module_shapes(arch)
    rank = lora.max_lora_rank
    for name in targeted(arch, lora.targets):
        in_features, out_features = shapes[name]
        if name in ROW_PARALLEL:
            per_layer += rank * in_features / tp + out_features * rank
        else:
            per_layer += rank * in_features + out_features * rank / tp
    layers = -(-arch.num_layers // pp)
    return per_layer * layers * lora.max_loras * dtype_bytes


def draft_weight_bytes(spec: SpeculativeSettings, target_tp: int) -> float:
    """The draft model's (or head's) weights on one GPU at its TP (1 or the target's, vLLM's default)."""
    if spec.draft is None:
        return 0.0
    tp = spec.draft_tp or target_tp
    return float(stage_weight_bytes(spec.draft, tp, 1)[0])
