"""Which GPU model runner vLLM starts for a model (V1 or V2, `VllmConfig.use_v2_model_runner`), and what
that changes in the startup memory accounting (CUDA-graph estimate, persistent per-request buffers)."""

from __future__ import annotations

from vllmctl.catalog.arch import ModelArch
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import Version

INT32_BYTES = 4

# config/vllm.py, DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES and _is_default_v2_model_runner_model, by release:
# 0.22 and 0.23 default V2 for the listed dense, unquantized architectures; 0.24 for the listed ones; from
# 0.25 for every dense model plus the listed MoE ones; 0.29 drops the list (V2 unless a feature needs V1).
V2_LISTED: tuple[tuple[Version, frozenset[str]], ...] = (
    ((0, 22, 0), frozenset({"Qwen3ForCausalLM"})),
    ((0, 23, 0), frozenset({"Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"})),
    (
        (0, 24, 0),
        frozenset(
            {
                "Qwen3ForCausalLM",
                "DeepseekV2ForCausalLM",
                "Qwen2MoeForCausalLM",
                "GraniteMoeForCausalLM",
                "LlamaForCausalLM",
                "MistralForCausalLM",
            }
        ),
    ),
    ((0, 25, 0), frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})),
)
V2_ONLY_LISTED_UNTIL: Version = (0, 24, 0)  # through 0.24 only listed architectures default to V2
V2_FOR_ALL_SINCE: Version = (0, 29, 0)
# V2's profile_cudagraph_memory returned 0 ("TBD whether we keep this API") until 0.29 implemented it
# (v1/worker/gpu/model_runner.py): before that its graphs are captured after the KV cache, outside the budget.
V2_GRAPH_ESTIMATE_SINCE: Version = (0, 29, 0)
# From 0.27 the profiler counts everything held since the worker's snapshot (utils/mem_utils.py,
# total_consumed), so buffers allocated before the profile run land in the budget too.
TOTAL_CONSUMED_SINCE: Version = (0, 27, 0)
V2_SPEC_METHODS = ("eagle", "eagle3", "mtp", "dflash")  # others (ngram, draft models) fall back to V1
# A V2 start that compiles its graphs cold (no torch.compile cache yet: a release's first start) peaks about
# 0.9 GiB higher in the profile run than one that loads them: the median excess of the eight public cold V2
# starts over the warm-cache model (0.26-0.29: 0.25-1.29 GiB; RTX 4090 Qwen3-8B pairs, peak 1.18 cold vs
# 0.19 warm, and 1.45 vs 0.45 GiB outside the KV cache). V1-runner logs hold none up to a cold 0.16.0 start
# (2x L40S), but cold V1 starts do from 0.19: an A10G (0.55-0.65 GiB beyond the warm 0.19.1 A100 start), two
# RTX A6000 AWQ starts (0.5-0.8, a table), 0.22.0 and 0.22.1 (0.9 and 1.05); two cold 0.19 ones show none (4x
# L40S 72B, an RTX 5090 0.6B). No cold 0.17-0.18 V1 log was found; the planner assumes it from 0.18.
COLD_COMPILE_GIB = 0.9
V1_COLD_COMPILE_SINCE: Version = (0, 18, 0)


def _listed(version: Version) -> frozenset[str]:
    found: frozenset[str] = frozenset()
    for since, names in V2_LISTED:
        if version >= since:
            found = names
    return found


def uses_v2_runner(arch: ModelArch, settings: VllmSettings) -> bool:
    """vLLM's choice for this model and version (VLLM_USE_V2_MODEL_RUNNER, when set, wins)."""
    if settings.model_runner != "auto":
        return settings.model_runner == "v2"
    version = settings.version
    if version < V2_LISTED[0][0]:
        return False
    spec = settings.speculative
    if spec is not None and spec.method not in V2_SPEC_METHODS:
        return False
    if version >= V2_FOR_ALL_SINCE:
        return True
    listed = arch.architecture in _listed(version)
    if version < (0, 24, 0):
        return listed and not arch.is_moe and arch.quantization is None
    if version < (0, 25, 0):
        return listed
    return listed or not arch.is_moe


def graph_estimate_in_budget(arch: ModelArch, settings: VllmSettings, since: Version) -> bool:
    """Whether the startup profiler subtracts a CUDA-graph estimate from the KV budget (`since`: the V1
    runner's first version with the estimate on by default)."""
    if settings.version < since:
        return False
    return settings.version >= V2_GRAPH_ESTIMATE_SINCE or not uses_v2_runner(arch, settings)


def cold_compile_bytes(arch: ModelArch, settings: VllmSettings) -> float:
    """The profile run's extra peak when the graphs compile without a cache (eager: none): the V2 runner's,
    and the V1 runner's from 0.18."""
    if settings.enforce_eager or settings.compile_cache != "cold":
        return 0.0
    if not uses_v2_runner(arch, settings) and settings.version < V1_COLD_COMPILE_SINCE:
        return 0.0
    return COLD_COMPILE_GIB * (1 << 30)


def persistent_buffer_bytes(arch: ModelArch, settings: VllmSettings) -> float:
    """Per-request buffers the V2 runner keeps from start and the profiler counts from 0.27: the penalties'
    output-token counts, max_num_seqs x vocab int32 (v1/worker/gpu/sample/penalties.py)."""
    if settings.version < TOTAL_CONSUMED_SINCE or not uses_v2_runner(arch, settings):
        return 0.0
    return float(settings.max_num_seqs * arch.vocab_size * INT32_BYTES)


def runner_reason(arch: ModelArch, settings: VllmSettings) -> str:
    """One line saying which runner starts and what it adds to this estimate."""
    why = "set by VLLM_USE_V2_MODEL_RUNNER" if settings.model_runner != "auto" else "vLLM's default here"
    parts = [f"model runner: V2 ({why})" if uses_v2_runner(arch, settings) else "model runner: V1"]
    compiling = cold_compile_bytes(arch, settings)
    if compiling:
        parts.append(
            f"a cold torch.compile adds {compiling / (1 << 30):.2f} GiB to the peak "
            "(--compile-cache warm: a restart)"
        )
    buffers = persistent_buffer_bytes(arch, settings)
    if buffers:
        parts.append(f"{buffers / (1 << 30):.2f} GiB of per-request penalty counts are counted (from 0.27)")
    return "; ".join(parts)
