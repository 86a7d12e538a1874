"""The serve flags vllmctl knows for each engine (vLLM, SGLang): their types, limits and argv form.

Inventory `engine_args` use the snake_case names; `to_cli` turns one into the engine's argv tokens.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

FlagType = Literal["int", "float", "bool", "str", "json", "list"]


@dataclass(frozen=True)
class FlagSpec:
    """One engine flag: its value type, allowed values, and whether false is spelled `--no-<flag>`."""

    type: FlagType
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    negatable: bool = False  # argparse BooleanOptionalAction: false is `--no-<flag>`; else false is omitted
    secret: bool = False  # a value that must come from `secrets:` ({secret: NAME}), never a literal
    refused: str = ""  # why vllmctl refuses this flag for now (validate says so, instead of render failing)


def _int(minimum: float | None = 1, maximum: float | None = None) -> FlagSpec:
    return FlagSpec("int", minimum=minimum, maximum=maximum)


def _float(minimum: float | None = 0, maximum: float | None = None, exclusive: bool = False) -> FlagSpec:
    return FlagSpec("float", minimum=minimum, maximum=maximum, exclusive_minimum=exclusive)


def _choice(*choices: str) -> FlagSpec:
    return FlagSpec("str", choices=choices)


STR = FlagSpec("str")
JSON = FlagSpec("json")
LIST = FlagSpec("list")
SWITCH = FlagSpec("bool", negatable=True)  # vLLM's config booleans take --x / --no-x
STORE_TRUE = FlagSpec("bool")
SECRET = FlagSpec("str", secret=True)
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

VLLM_FLAGS: dict[str, FlagSpec] = {
    "tensor_parallel_size": _int(),
    "pipeline_parallel_size": _int(),
    "data_parallel_size": _int(),
    "data_parallel_size_local": _int(0),
    "enable_expert_parallel": SWITCH,
    "enable_eplb": SWITCH,
    "distributed_executor_backend": _choice("ray", "mp", "uni", "external_launcher"),
    "disable_custom_all_reduce": SWITCH,
    "gpu_memory_utilization": _float(0, 1, exclusive=True),
    "kv_cache_memory_bytes": _int(),
    "max_model_len": _int(),
    "max_num_seqs": _int(),
    "stream_interval": _int(),  # tokens per streamed event (seen in vLLM 0.32.0's arg_utils)
    "max_num_batched_tokens": _int(),
    "max_num_partial_prefills": _int(),
    "long_prefill_token_threshold": _int(0),
    "enable_chunked_prefill": SWITCH,
    "enable_prefix_caching": SWITCH,
    "prefix_caching_hash_algo": _choice("sha256", "sha256_cbor", "builtin"),
    "enforce_eager": SWITCH,
    "async_scheduling": SWITCH,
    "scheduling_policy": _choice("fcfs", "priority"),
    "num_gpu_blocks_override": _int(),
    "kv_cache_dtype": _choice("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
    "calculate_kv_scales": SWITCH,
    "quantization": STR,
    "dtype": _choice(*DTYPES),
    "block_size": FlagSpec("int", choices=("1", "8", "16", "32", "64", "128")),
    "swap_space": _float(0),
    "cpu_offload_gb": _float(0),
    "load_format": STR,
    "download_dir": STR,
    "served_model_name": LIST,
    "trust_remote_code": SWITCH,
    "tokenizer": STR,
    "tokenizer_mode": _choice("auto", "slow", "mistral", "custom"),
    "revision": STR,
    "code_revision": STR,
    "tokenizer_revision": STR,
    "seed": _int(0),
    "max_logprobs": _int(-1),
    "max_parallel_loading_workers": _int(),
    "compilation_config": JSON,
    "override_generation_config": JSON,
    "hf_overrides": JSON,
    "speculative_config": JSON,
    "kv_transfer_config": JSON,
    "limit_mm_per_prompt": JSON,
    "mm_processor_cache_gb": _float(0),
    "generation_config": STR,
    "disable_sliding_window": SWITCH,
    "enable_sleep_mode": SWITCH,
    "enable_lora": SWITCH,
    "max_loras": _int(),
    "max_lora_rank": _int(),
    "max_cpu_loras": _int(),
    "lora_modules": LIST,
    "chat_template": STR,
    "enable_auto_tool_choice": STORE_TRUE,
    "tool_call_parser": STR,
    "reasoning_parser": STR,
    "structured_outputs_config": JSON,
    "disable_log_requests": STORE_TRUE,
    "enable_log_requests": STORE_TRUE,
    "disable_log_stats": STORE_TRUE,
    "uvicorn_log_level": _choice("debug", "info", "warning", "error", "critical", "trace"),
    "disable_uvicorn_access_log": STORE_TRUE,
    "max_log_len": _int(0),
    "api_key": SECRET,
    "allowed_local_media_path": STR,
    "logprobs_mode": _choice("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"),
}

SGLANG_FLAGS: dict[str, FlagSpec] = {
    "tp_size": _int(),
    "dp_size": _int(),
    "pp_size": _int(),
    "ep_size": _int(),
    "enable_dp_attention": STORE_TRUE,
    "mem_fraction_static": _float(0, 1, exclusive=True),
    "chunked_prefill_size": _int(-1),
    "enable_mixed_chunk": STORE_TRUE,
    "cuda_graph_max_bs": _int(),
    "disable_cuda_graph": STORE_TRUE,
    "max_running_requests": _int(),
    "max_total_tokens": _int(),
    "max_prefill_tokens": _int(),
    "max_queued_requests": _int(),
    "schedule_policy": _choice("lpm", "random", "fcfs", "dfs-weight", "lof"),
    "schedule_conservativeness": _float(0, exclusive=True),
    "context_length": _int(),
    "page_size": _int(),
    "quantization": STR,
    "kv_cache_dtype": _choice("auto", "fp8_e5m2", "fp8_e4m3"),
    "dtype": _choice(*DTYPES),
    "disable_radix_cache": STORE_TRUE,
    "enable_torch_compile": STORE_TRUE,
    "torch_compile_max_bs": _int(),
    "disable_overlap_schedule": STORE_TRUE,
    "disable_custom_all_reduce": STORE_TRUE,
    "attention_backend": STR,
    "sampling_backend": _choice("flashinfer", "pytorch"),
    "grammar_backend": _choice("xgrammar", "outlines", "llguidance", "none"),
    "trust_remote_code": STORE_TRUE,
    "served_model_name": STR,
    "tokenizer_path": STR,
    "revision": STR,
    "load_format": STR,
    "download_dir": STR,
    "random_seed": _int(0),
    "stream_interval": _int(),
    "enable_metrics": STORE_TRUE,
    "log_level": _choice("debug", "info", "warning", "error", "critical"),
    "log_requests": STORE_TRUE,
    "json_model_override_args": JSON,
    "preferred_sampling_params": JSON,  # default SamplingParams under each request's own values
    "chat_template": STR,
    "tool_call_parser": STR,
    "reasoning_parser": STR,
    "speculative_algorithm": _choice("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"),
    "speculative_draft_model_path": STR,
    "speculative_num_steps": _int(),
    "speculative_eagle_topk": _int(),
    "speculative_num_draft_tokens": _int(),
    "watchdog_timeout": _float(0, exclusive=True),
    # SGLang reads its key only from argv, and a unit's ExecStart is world-readable on the host
    "api_key": FlagSpec(
        "str", secret=True, refused="not supported: SGLang takes the key only on its command line"
    ),
}

KNOWN_FLAGS: dict[str, dict[str, FlagSpec]] = {"vllm": VLLM_FLAGS, "sglang": SGLANG_FLAGS}

# Set by vllmctl itself from the model entry; an engine_args value would fight it.
MANAGED_FLAGS: dict[str, str] = {
    "model": "source",
    "model_path": "source",
    "host": "the service listens where vllmctl decides",
    "port": "port",
}


DASH_PROBLEM = "starts with '-', so the engine would read it as another flag"


def dash_item(value: Any) -> int | None:
    """The index of the first list item that would become a flag of its own, or None."""
    if isinstance(value, list):
        return next((i for i, item in enumerate(value) if isinstance(item, str) and item[:1] == "-"), None)
    return None


def value_problem(spec: FlagSpec, value: Any) -> str | None:
    """Why a value does not fit a flag, or None when it does.

    Each value is one argv word after its flag, so text starting with '-' is refused: it would be a flag.
    """
    if spec.secret:
        ok = isinstance(value, dict) and set(value) == {"secret"} and isinstance(value["secret"], str)
        return None if ok else "must be a reference to a secret, {secret: NAME}, never the value itself"
    if spec.type == "bool":
        return None if isinstance(value, bool) else "expected true or false"
    if spec.type == "json":
        if not isinstance(value, dict | list | str):
            return "expected a mapping, a list or a JSON string"
        return DASH_PROBLEM if isinstance(value, str) and value[:1] == "-" else None
    if spec.type == "list":
        items = value if isinstance(value, list) else [value]
        if not (items and all(isinstance(item, str) for item in items)):
            return "expected a string or a list"
        index = dash_item(items)
        if index is None:
            return None
        return DASH_PROBLEM if isinstance(value, str) else f"item {index} {DASH_PROBLEM}"
    if spec.type == "str":
        if not isinstance(value, str):
            return "expected a string"
        if value[:1] == "-":
            return DASH_PROBLEM
    elif isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected {'an integer' if spec.type == 'int' else 'a number'}"
    elif spec.type == "int" and not isinstance(value, int):
        return "expected an integer"
    elif not math.isfinite(value):
        return "expected a finite number"
    if spec.choices is not None and str(value) not in spec.choices:
        return f"must be one of {', '.join(spec.choices)}"
    if isinstance(value, int | float):
        return _range_problem(spec, value)
    return None


def _range_problem(spec: FlagSpec, value: float) -> str | None:
    if spec.minimum is not None:
        if spec.exclusive_minimum and value <= spec.minimum:
            return f"must be > {spec.minimum:g}"
        if not spec.exclusive_minimum and value < spec.minimum:
            return f"must be >= {spec.minimum:g}"
    if spec.maximum is not None and value > spec.maximum:
        return f"must be <= {spec.maximum:g}"
    return None


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def to_cli(engine: str, name: str, value: Any) -> list[str]:
    """argv tokens for one engine arg: `--max-model-len 8192`; bools bare or `--no-x`; mappings as JSON.

    A secret reference ({secret: NAME}) must be resolved by the caller before this is called.
    """
    spec = KNOWN_FLAGS[engine][name]
    flag = flag_name(name)
    if spec.secret and not isinstance(value, str):
        raise ValueError(f"{name}: resolve the secret reference {value!r} before building argv")
    if spec.type == "bool":
        if value:
            return [flag]
        return [f"--no-{flag[2:]}"] if spec.negatable else []
    if spec.type == "list":
        return [flag, *(value if isinstance(value, list) else [value])]
    if isinstance(value, dict | list):
        return [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
    return [flag, str(value)]
