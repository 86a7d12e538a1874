"""vLLM's parallelism checks: heads, KV heads and MLP shapes split by tensor parallel, pipeline stages, expert
parallel and EPLB. Each check quotes vLLM's message; the fixes list the sizes that would start.
"""

from __future__ import annotations

from vllmctl.planner.rules.base import RuleInput, Violation


def heads_divisible(given: RuleInput) -> Violation | None:
    # vllm/config/model.py:1046-1052, ModelConfig.verify_with_parallel_config
    heads, tp = given.arch.num_heads, given.settings.tp
    if heads % tp == 0:
        return None
    return Violation(
        f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}).",
        f"each of the {tp} ranks must hold a whole number of the model's {heads} query heads",
        "tensor_parallel_size must divide the attention heads",
    )


def kv_heads_divisible_or_replicated(given: RuleInput) -> Violation | None:
    # vllm/model_executor/layers/linear.py:900-908, QKVParallelLinear (divide() asserts)
    arch, tp = given.arch, given.settings.tp
    if arch.is_mla:
        return None  # one latent KV head, replicated on every rank
    kv = arch.num_kv_heads
    if kv % tp == 0 or tp % kv == 0:
        return None
    bigger, smaller = (kv, tp) if kv > tp else (tp, kv)
    return Violation(
        f"AssertionError: {bigger} is not divisible by {smaller}",
        f"{kv} KV heads can neither be split evenly over {tp} ranks nor replicated to them "
        "(vLLM needs kv_heads % tp == 0 or tp % kv_heads == 0)",
        "tensor_parallel_size must divide the KV heads or be a multiple of them",
    )


def mlp_shapes_divisible(given: RuleInput) -> Violation | None:
    # vllm/model_executor/layers/linear.py:452 (ColumnParallelLinear divide) and
    # vllm/model_executor/layers/fused_moe/layer.py:1065 (assert intermediate_size % self.tp_size == 0)
    arch, s = given.arch, given.settings
    tp = s.tp
    dense = arch.intermediate_size if (not arch.is_moe or arch.first_k_dense) else 0
    if dense and dense % tp:
        return Violation(
            f"AssertionError: {dense} is not divisible by {tp}",
            f"the MLP's intermediate size {dense} must split evenly over {tp} ranks",
            "tensor_parallel_size must divide the MLP intermediate size",
            flags=("tensor_parallel_size",),
        )
    if arch.is_moe and not s.expert_parallel and arch.moe_intermediate_size % tp:
        return Violation(
            "AssertionError (FusedMoE: assert intermediate_size % self.tp_size == 0)",
            f"each expert's intermediate size {arch.moe_intermediate_size} must split evenly over {tp} ranks",
            "a tensor_parallel_size that divides it, or enable_expert_parallel (whole experts per rank)",
        )
    return None


def pipeline_within_layers(given: RuleInput) -> Violation | None:
    # vllm/distributed/utils.py, get_pp_indices: every stage needs at least one layer
    layers, pp = given.arch.num_layers, given.settings.pp
    if pp <= layers:
        return None
    return Violation(
        f"pipeline_parallel_size ({pp}) is larger than the model's {layers} layers",
        "a pipeline stage without layers cannot be built",
        f"pipeline_parallel_size at most {layers}",
    )


def engine_within_node(given: RuleInput) -> Violation | None:
    # vllm/config/parallel.py:455-463: a world larger than the node's GPUs needs a Ray cluster across nodes
    s = given.settings
    # pipeline stages beyond one are placed on other nodes (multi_node groups), so a node holds TP x DP GPUs
    if s.tp * s.dp <= given.gpu_count * given.nodes:
        return None
    return Violation(
        f"world size {s.tp * s.dp} (TP {s.tp} x DP {s.dp}) is more than the {given.gpu_count} GPUs this node "
        'gives the model; vLLM then needs Ray across nodes ("Ray is required for multi-node inference")',
        f"tensor_parallel_size {s.tp} x data_parallel_size {s.dp} GPUs do not fit on {given.gpu_count}",
        f"tensor_parallel_size x data_parallel_size at most {given.gpu_count}, or a multi_node group",
    )


def expert_parallel_needs_moe(given: RuleInput) -> Violation | None:
    # vllm/config/model.py:1001-1016, ModelConfig._verify_with_expert_parallelism
    if not given.settings.expert_parallel or given.arch.is_moe:
        return None
    return Violation(
        "Number of experts in the model must be greater than 0 when expert parallelism is enabled.",
        f"{given.arch.name} is a dense model: it has no experts to distribute",
        "remove enable_expert_parallel",
    )


def eplb_config(given: RuleInput) -> Violation | None:
    # vllm/config/parallel.py:420-446 (ParallelConfig.__post_init__) and
    # vllm/model_executor/layers/fused_moe/layer.py:1018-1021 (even distribution of experts)
    s, arch = given.settings, given.arch
    if s.num_redundant_experts and not s.enable_eplb:
        return Violation(
            f"num_redundant_experts is set to {s.num_redundant_experts} but EPLB is not enabled. "
            "Either enable EPLB or unset num_redundant_experts.",
            "redundant experts exist only for the load balancer",
            "set enable_eplb or remove num_redundant_experts",
        )
    if not s.enable_eplb:
        return None
    if not s.expert_parallel:
        return Violation(
            "enable_expert_parallel must be True to use EPLB.",
            "the load balancer moves whole experts between expert-parallel ranks",
            "set enable_expert_parallel: true",
        )
    ep = s.tp * s.dp
    if ep <= 1:
        return Violation(
            f"EPLB requires tensor_parallel_size or data_parallel_size to be greater than 1, "
            f"but got TP={s.tp},DP={s.dp}.",
            "one rank has nothing to balance against",
            "use tensor_parallel_size or data_parallel_size above 1",
        )
    physical = arch.num_experts + s.num_redundant_experts
    if physical % ep == 0:
        return None
    sizes = [n for n in range(2, physical + 1) if physical % n == 0 and n <= given.gpu_count * s.dp]
    return Violation(
        "EPLB currently only supports even distribution of experts across ranks.",
        f"{arch.num_experts} experts + {s.num_redundant_experts} redundant = {physical} do not split evenly "
        f"over an expert-parallel group of {ep} (TP {s.tp} x DP {s.dp})",
        "num_redundant_experts so that experts + redundant divide by the EP size"
        + (f", or an EP size of {', '.join(map(str, sizes[:6]))}" if sizes else ""),
    )
