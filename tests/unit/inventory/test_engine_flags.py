"""The engine flag table: argv form of each kind of value and the value checks."""

from __future__ import annotations

import pytest

from vllmctl.engine_flags import KNOWN_FLAGS, FlagSpec, to_cli, value_problem

REQUIRED_VLLM = [
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "enforce_eager",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "block_size",
    "swap_space",
    "cpu_offload_gb",
    "kv_cache_memory_bytes",
    "served_model_name",
    "trust_remote_code",
    "download_dir",
    "tokenizer",
    "revision",
    "seed",
    "distributed_executor_backend",
    "enable_expert_parallel",
    "compilation_config",
    "override_generation_config",
    "limit_mm_per_prompt",
    "max_logprobs",
    "disable_log_requests",
    "api_key",
    "generation_config",
]
REQUIRED_SGLANG = [
    "tp_size",
    "dp_size",
    "mem_fraction_static",
    "chunked_prefill_size",
    "cuda_graph_max_bs",
    "max_running_requests",
    "schedule_policy",
    "schedule_conservativeness",
    "context_length",
    "quantization",
    "kv_cache_dtype",
    "disable_radix_cache",
    "enable_torch_compile",
    "disable_overlap_schedule",
]


def test_table_has_the_flags_platform_engineers_use() -> None:
    assert set(REQUIRED_VLLM) <= set(KNOWN_FLAGS["vllm"])
    assert set(REQUIRED_SGLANG) <= set(KNOWN_FLAGS["sglang"])
    assert all(isinstance(spec, FlagSpec) for flags in KNOWN_FLAGS.values() for spec in flags.values())


@pytest.mark.parametrize(
    ("engine", "name", "value", "argv"),
    [
        ("vllm", "max_model_len", 8192, ["--max-model-len", "8192"]),
        ("vllm", "gpu_memory_utilization", 0.92, ["--gpu-memory-utilization", "0.92"]),
        ("vllm", "enable_prefix_caching", True, ["--enable-prefix-caching"]),
        ("vllm", "enable_prefix_caching", False, ["--no-enable-prefix-caching"]),
        ("vllm", "disable_log_requests", False, []),
        ("vllm", "served_model_name", ["a", "b"], ["--served-model-name", "a", "b"]),
        ("vllm", "served_model_name", "a", ["--served-model-name", "a"]),
        (
            "vllm",
            "compilation_config",
            {"level": 3, "cudagraph_capture_sizes": [1, 2]},
            ["--compilation-config", '{"cudagraph_capture_sizes":[1,2],"level":3}'],
        ),
        ("vllm", "kv_cache_dtype", "fp8", ["--kv-cache-dtype", "fp8"]),
        ("sglang", "tp_size", 4, ["--tp-size", "4"]),
        ("sglang", "disable_radix_cache", True, ["--disable-radix-cache"]),
        ("sglang", "disable_radix_cache", False, []),
        (
            "sglang",
            "json_model_override_args",
            {"rope_scaling": None},
            ["--json-model-override-args", '{"rope_scaling":null}'],
        ),
    ],
)
def test_to_cli(engine: str, name: str, value: object, argv: list[str]) -> None:
    assert to_cli(engine, name, value) == argv


@pytest.mark.parametrize(
    ("engine", "name", "value", "problem"),
    [
        ("vllm", "tensor_parallel_size", 0, "must be >= 1"),
        ("vllm", "tensor_parallel_size", 2.0, "expected an integer"),
        ("vllm", "tensor_parallel_size", True, "expected an integer"),
        ("vllm", "gpu_memory_utilization", 0, "must be > 0"),
        ("vllm", "gpu_memory_utilization", 1, None),
        ("vllm", "gpu_memory_utilization", float("nan"), "expected a finite number"),
        ("vllm", "block_size", 24, "must be one of 1, 8, 16, 32, 64, 128"),
        ("vllm", "block_size", 16, None),
        ("vllm", "enforce_eager", "true", "expected true or false"),
        ("vllm", "served_model_name", [], "expected a string or a list"),
        ("vllm", "api_key", "abc", "must be a reference to a secret, {secret: NAME}, never the value itself"),
        ("vllm", "api_key", {"secret": "k"}, None),
        ("sglang", "chunked_prefill_size", -1, None),
        ("sglang", "mem_fraction_static", 1.2, "must be <= 1"),
        ("sglang", "schedule_policy", "lifo", "must be one of lpm, random, fcfs, dfs-weight, lof"),
    ],
)
def test_value_problem(engine: str, name: str, value: object, problem: str | None) -> None:
    assert value_problem(KNOWN_FLAGS[engine][name], value) == problem


def test_to_cli_refuses_an_unresolved_secret_reference() -> None:
    assert to_cli("vllm", "api_key", "resolved-value") == ["--api-key", "resolved-value"]
    with pytest.raises(ValueError, match="resolve the secret reference"):
        to_cli("vllm", "api_key", {"secret": "serving_key"})


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        ("tokenizer", "--trust-remote-code", "starts with '-'"),
        ("revision", "-x", "starts with '-'"),
        ("compilation_config", "-O3", "starts with '-'"),
        ("served_model_name", "--port", "starts with '-'"),
        ("served_model_name", ["a", "b", "--port"], "item 2 starts with '-'"),
        ("max_logprobs", -1, None),  # a negative number is still one value
        ("tokenizer", "org/tok-v2", None),
        ("served_model_name", ["a-b", "c"], None),
    ],
)
def test_no_value_becomes_a_flag_of_its_own(flag: str, value: object, why: str | None) -> None:
    problem = value_problem(KNOWN_FLAGS["vllm"][flag], value)
    assert (problem is None) if why is None else (problem is not None and why in problem)
