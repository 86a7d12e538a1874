"""vLLM V1-engine startup memory accounting, per GPU: requested = total × utilization; available KV =
requested − weights − profile-run peak − non-torch increase (0.18-0.19 with graphs: plus what the sample
capture leaves) − CUDA-graph estimate (from 0.20, graphs on) −
the V2 model runner's counted buffers (model_runner.py says which runner starts and what it changes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel
from vllmctl.catalog.params import pipeline_stages
from vllmctl.planner.allocator import allocated_block_bytes, load_max_split
from vllmctl.planner.hybrid_kv import layout_for
from vllmctl.planner.kv import kv_layout
from vllmctl.planner.lora_memory import draft_weight_bytes, lora_slot_bytes, mtp_weight_bytes
from vllmctl.planner.model_runner import cold_compile_bytes, graph_estimate_in_budget, persistent_buffer_bytes
from vllmctl.planner.multimodal import encoder_memory
from vllmctl.planner.profile_run import activation_peak_bytes
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import (
    CUDAGRAPH_PROFILING_SINCE,
    GRAPHS_PROFILED_SINCE,
    NCCL_OUTSIDE_BUDGET_SINCE,
    V1_DEFAULT_SINCE,
    Version,
    cudagraph_capture_sizes,
)
from vllmctl.planner.weights import expert_padding, fp8_marlin, rope_cache_tensors, stage_weight_bytes

CUDA_CONTEXT_GIB = 0.5  # taken before vLLM's first snapshot (H100: 78.66 of 79.19 GiB free at start)
NON_TORCH_GIB = 0.07  # cuBLAS/cuDNN workspaces created in the profile run (0.10 logs: 0.06-0.07 GiB)
BASELINE_SNAPSHOT_SINCE: Version = (0, 9, 1)  # V1 measures from a snapshot taken after the CUDA context
CUSTOM_ALLREDUCE_GIB = 0.14  # IPC buffers of vLLM's custom all-reduce when TP > 1
# From 0.11 (NCCL set up before the snapshot) the profile run's first collectives still allocate NCCL and
# symmetric-memory all-reduce buffers lazily: logged on H100 about 0.13 GiB at TP 1 and 0.54 GiB at TP 2.
NON_TORCH_V011_GIB = 0.13
NVLINK_TP_NON_TORCH_V011_GIB = 0.54
# The V0 engine (before 0.8) measures from a snapshot taken after the CUDA context and before NCCL starts
# (worker/worker.py init_device, determine_num_available_blocks): released logs show 0.09-0.35 GiB of
# non-torch at TP 1 (0.6.4 RTX 3090 vllm#10517, 0.7.1 V100), and at TP 8 x PP 2 on A100s 0.93 (first stage)
# and 2.15 GiB (second stage, with the pipeline's send/recv buffers) in 0.8.3. The larger of each is used.
V0_NON_TORCH_GIB = 0.35
V0_TP_NON_TORCH_GIB = 1.4
# 0.18-0.19 run a sample graph capture inside the memory profile but subtract no estimate: what the capture
# leaves behind (kernels loaded for the capture sizes, driver state) lands in the non-torch increase. Public
# starts: nine 0.17.1 with graphs and a 0.19 eager one within 0.08 GiB of the rest of the model; 0.18-0.19
# starts with graphs whose graphs compiled warm, or cold without the cold-compile peak (model_runner.py),
# 0.14-0.17 GiB below it (0.18.1 RTX 5090 Laptop and 0.19.1 A100 warm: 0.172, 0.168); the largest is taken.
GRAPH_PROBE_RESIDUE_GIB = 0.17
GRAPH_MIB_PER_PIECE = 0.3  # pool growth per captured batch size per piecewise graph segment
PP_P2P_GIB = 0.75  # NCCL send/recv buffers are created lazily in the profile run, so they land in budget


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU figures (GiB) for the pipeline stage with the fewest KV blocks; JSON-able."""

    engine: str
    total_gib: float
    requested_gib: float
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    encoder_gib: float
    cudagraph_gib: float
    cudagraph_in_budget: bool  # the capture itself is inside the budget (0.20+), not after the KV allocation
    nccl_gib: float
    nccl_in_budget: bool
    available_kv_cache_gib: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks: int
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    needed_kv_gib: float
    fits: bool
    max_model_len_that_fits: int
    startup_headroom_ok: bool
    runner_buffers_gib: float = 0.0  # persistent per-request buffers the profiler counts (V2 runner, 0.27+)
    restart_kv_cache_tokens: int = 0  # a restart whose graphs torch.compile loads from its cache (V2: more)
    graph_probe_gib: float = 0.0  # of non_torch_gib: what the 0.18-0.19 sample graph capture leaves in budget
    allocator_blocks_gib: float = 0.0  # of weights_gib: what the caching allocator counts beyond the tensors

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def cudagraph_bytes(arch_layers: int, settings: VllmSettings) -> float:
    """Approximate CUDA-graph pool: one piecewise segment per layer (+1) for each captured size."""
    if settings.enforce_eager:
        return 0.0
    sizes = settings.capture_sizes or cudagraph_capture_sizes(
        settings.max_num_seqs, settings.max_num_batched_tokens
    )
    graphs = len(sizes) * (arch_layers + 1)
    factor = 1.5 if settings.tp > 1 else 1.0  # all-reduce nodes add per-graph buffers
    return graphs * GRAPH_MIB_PER_PIECE * factor * (1 << 20)


def nccl_bytes(tp: int, pp: int, interconnect: str = "nvlink") -> float:
    """NCCL communicator buffers per GPU; NVLink/NVSwitch systems also reserve NVLS and more channels."""
    world = tp * pp
    if world == 1:
        return 0.0
    base, per_peer = (0.5, 0.25) if interconnect == "nvlink" else (0.25, 0.05)
    return (base + per_peer * (world - 1) + 0.5 * (pp - 1)) * GIB


def non_torch_bytes(settings: VllmSettings, interconnect: str) -> float:
    """Memory outside PyTorch's allocator that grows during the profile run (inside the budget)."""
    if settings.version < V1_DEFAULT_SINCE:
        base = V0_NON_TORCH_GIB if settings.tp == 1 else V0_TP_NON_TORCH_GIB
    elif settings.version >= NCCL_OUTSIDE_BUDGET_SINCE:
        if settings.tp == 1:
            base = NON_TORCH_V011_GIB
        elif interconnect == "nvlink":
            base = NVLINK_TP_NON_TORCH_V011_GIB
        else:  # PCIe: no symmetric-memory all-reduce; custom all-reduce only for two GPUs
            base = NON_TORCH_GIB + CUSTOM_ALLREDUCE_GIB
    else:
        base = NON_TORCH_GIB + (CUSTOM_ALLREDUCE_GIB if settings.tp > 1 else 0.0)
    if settings.version < BASELINE_SNAPSHOT_SINCE and settings.version >= V1_DEFAULT_SINCE:
        # 0.8.0-0.9.0 (v1/worker/gpu_worker.py determine_available_memory) took everything used on the device
        # after the profile run, less PyTorch's allocations, as non-torch: the CUDA context and NCCL included
        base += CUDA_CONTEXT_GIB + nccl_bytes(settings.tp, settings.pp, interconnect) / GIB
    return GIB * (base + (PP_P2P_GIB if settings.pp > 1 else 0.0))


def side_weight_bytes(arch: ModelArch, settings: VllmSettings) -> float:
    """Per GPU beyond the model's own weights, held from load: LoRA slots and a draft's weights. The profile
    run's dummy adapters are built on the CPU and copied into those slots (lora/models.py, create_dummy_lora),
    so they add nothing on the GPU."""
    weights = 0.0
    if settings.lora is not None:
        weights += lora_slot_bytes(
            arch, settings.lora, arch.dtype_bytes, settings.tp, settings.pp, settings.version
        )
    spec = settings.speculative
    if spec is not None and spec.method == "mtp":
        weights += mtp_weight_bytes(
            arch, settings.tp, settings.expert_parallel, settings.tp * settings.dp, settings.version
        )
    elif spec is not None:
        weights += draft_weight_bytes(spec, settings.tp)
    return weights


def target_kv_share(arch: ModelArch, settings: VllmSettings, layout: Any, gpu: GpuModel) -> float:
    """The fraction of KV memory the target's layers keep when a draft model's (or the MTP module's) layers
    cache KV beside them in the same blocks."""
    spec = settings.speculative
    if spec is not None and spec.method == "mtp" and arch.mtp_layers:
        draft = kv_layout(
            arch, settings.tp, (0, arch.mtp_layers), settings.kv_cache_dtype, gpu.compute_capability
        )
    elif spec is not None and spec.draft is not None:
        tp, layers = spec.draft_tp or settings.tp, (0, spec.draft.num_layers)
        draft = kv_layout(spec.draft, tp, layers, settings.kv_cache_dtype, gpu.compute_capability)
    else:
        return 1.0
    own = float(layout.bytes_per_token)
    return own / (own + float(draft.bytes_per_token)) if own > 0 else 1.0


def vllm_memory(arch: ModelArch, gpu: GpuModel, settings: VllmSettings) -> MemoryBreakdown:
    """vLLM's startup figures for this model, GPU and settings; the worst pipeline stage is reported."""
    total = gpu.cuda_bytes
    requested = total * settings.gpu_memory_utilization
    pad = expert_padding(arch, gpu.compute_capability, settings.version, settings.mxfp4_backend)
    shape = (
        arch,
        settings.tp,
        settings.pp,
        settings.expert_parallel,
        pad,
        settings.tp * settings.dp,
        settings.num_redundant_experts if settings.enable_eplb else 0,
    )
    max_split = load_max_split(settings.version, gpu.vendor)
    marlin = fp8_marlin(arch, gpu.compute_capability, gpu.vendor)
    weights_per_stage = stage_weight_bytes(*shape, max_split=max_split, marlin=marlin)
    unrounded = stage_weight_bytes(*shape, marlin=marlin)
    blocks_per_stage = [a - b for a, b in zip(weights_per_stage, unrounded, strict=True)]
    stages = pipeline_stages(arch.num_layers, settings.pp)
    ropes = sum(allocated_block_bytes(t, max_split) for t in rope_cache_tensors(arch))
    extra = side_weight_bytes(arch, settings) + ropes
    weights_per_stage = tuple(w + extra for w in weights_per_stage)
    encoder = encoder_memory(
        arch, settings.tp, settings.max_num_batched_tokens, settings.max_num_seqs, settings.mm_items,
        settings.mm_videos, settings.version, settings.max_model_len,
    )  # fmt: skip
    nccl = nccl_bytes(settings.tp, settings.pp, gpu.interconnect)
    nccl_in_budget = settings.version < NCCL_OUTSIDE_BUDGET_SINCE and nccl > 0
    estimate_graphs = graph_estimate_in_budget(arch, settings, CUDAGRAPH_PROFILING_SINCE)
    # nothing captured (eager, or no capture sizes: cudagraph_bytes 0) means no sample capture either
    captures = cudagraph_bytes(0, settings) > 0
    probed = captures and graph_estimate_in_budget(arch, settings, GRAPHS_PROFILED_SINCE)
    probe = GRAPH_PROBE_RESIDUE_GIB * GIB if probed and not estimate_graphs else 0.0
    non_torch = non_torch_bytes(settings, gpu.interconnect) + probe
    buffers = persistent_buffer_bytes(arch, settings)
    compiling = cold_compile_bytes(arch, settings)
    best: tuple[int, Any] | None = None
    for number, ((first, last), weights) in enumerate(zip(stages, weights_per_stage, strict=True)):
        activation = (
            activation_peak_bytes(
                arch,
                settings.tp,
                settings.max_num_batched_tokens,
                settings.max_num_seqs,
                settings.version,
                last_stage=number == settings.pp - 1,
                expert_parallel=settings.expert_parallel,
                sampler=settings.sampler,
                data_parallel=settings.dp,
            )
            + compiling
        )
        if number == 0 and encoder.weights:
            # The encoder's profile run peaks on its own; its output embeddings stay for the decoder run.
            weights += encoder.weights
            activation = max(activation, encoder.activation) + encoder.outputs
        layout = layout_for(
            arch,
            settings.tp,
            (first, last),
            settings.kv_cache_dtype,
            gpu.compute_capability,
            settings.block_size,
        )
        graphs = cudagraph_bytes(last - first, settings)
        graphs_in_budget = estimate_graphs and graphs > 0
        if settings.kv_cache_memory_bytes is not None:
            available = float(settings.kv_cache_memory_bytes)
        else:
            graphs_taken = graphs if graphs_in_budget else 0.0
            available = requested - weights - activation - non_torch - buffers - graphs_taken
        # a draft's KV layers share each block's tokens with the target's: the target keeps its share
        blocks = layout.num_blocks(int(max(available, 0) * target_kv_share(arch, settings, layout, gpu)))
        if best is None or blocks < best[0]:
            best = (blocks, (number, layout, weights, activation, graphs, graphs_in_budget, available))
    assert best is not None
    blocks, (number, layout, weights, activation, graphs, graphs_in_budget, available) = best
    # vLLM refuses to start when free memory (total - CUDA context - NCCL from v0.11) is below the request;
    # before v0.20 graphs are captured after the KV allocation, into the headroom plus the freed activations.
    before_start = CUDA_CONTEXT_GIB * GIB + (0.0 if nccl_in_budget else nccl)
    headroom = total - requested
    graphs_ok = graphs_in_budget or headroom + activation >= before_start + graphs
    mnbt = settings.max_num_batched_tokens
    needed = layout.needed_bytes(settings.max_model_len, mnbt)
    usable = int(max(available, 0))
    fits = available > 0 and needed <= usable
    restart = available + (compiling if settings.kv_cache_memory_bytes is None else 0.0)
    restart_blocks = layout.num_blocks(int(max(restart, 0) * target_kv_share(arch, settings, layout, gpu)))
    return MemoryBreakdown(
        engine="vllm",
        total_gib=total / GIB,
        requested_gib=requested / GIB,
        weights_gib=weights / GIB,
        activation_peak_gib=activation / GIB,
        non_torch_gib=non_torch / GIB,
        encoder_gib=(encoder.weights + encoder.activation + encoder.outputs) / GIB,
        cudagraph_gib=graphs / GIB,
        cudagraph_in_budget=graphs_in_budget,
        nccl_gib=nccl / GIB,
        nccl_in_budget=nccl_in_budget,
        available_kv_cache_gib=available / GIB,
        kv_bytes_per_token=layout.bytes_per_token,
        block_size=layout.block_size,
        num_blocks=blocks,
        kv_cache_tokens=layout.tokens(blocks),
        max_model_len=settings.max_model_len,
        max_concurrency=round(layout.max_concurrency(blocks, settings.max_model_len, mnbt), 2),
        needed_kv_gib=needed / GIB,
        fits=fits,
        max_model_len_that_fits=layout.largest_len_that_fits(usable, settings.max_model_len, mnbt)
        if usable
        else 0,
        startup_headroom_ok=headroom >= before_start and graphs_ok,
        runner_buffers_gib=buffers / GIB,
        restart_kv_cache_tokens=layout.tokens(restart_blocks),
        graph_probe_gib=probe / GIB,
        allocator_blocks_gib=blocks_per_stage[number] / GIB,
    )
