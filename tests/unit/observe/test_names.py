"""The metric-name table: each vLLM release gets the names its vllm/v1/metrics/loggers.py exports (the lines
cited in vllmctl/observe/names.py), and the names for 0.32.0 are all in a real vLLM 0.32.0's /metrics."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from vllmctl.observe.names import SGLANG, VLLM, engine_metrics

CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu" / "metrics.txt"

# release -> (KV usage, inter-token latency, prefix-cache queries), as read in that release's loggers.py
RENAMES = {
    "0.7.3": (
        "vllm:gpu_cache_usage_perc",
        "vllm:time_per_output_token_seconds",
        "vllm:gpu_prefix_cache_queries",
    ),
    "0.9.0": (
        "vllm:gpu_cache_usage_perc",
        "vllm:time_per_output_token_seconds",
        "vllm:gpu_prefix_cache_queries",
    ),
    "0.9.2": ("vllm:kv_cache_usage_perc", "vllm:time_per_output_token_seconds", "vllm:prefix_cache_queries"),
    "0.10.1": ("vllm:kv_cache_usage_perc", "vllm:time_per_output_token_seconds", "vllm:prefix_cache_queries"),
    "0.10.2": ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries"),
    "0.11.0": ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries"),
    "0.12.0": ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries"),
    "0.32.0": ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries"),
    "0.34.0": ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:prefix_cache_queries"),
}


@pytest.mark.parametrize("release", sorted(RENAMES))
def test_each_release_gets_the_names_it_exports(release: str) -> None:
    names = engine_metrics("vllm", release)
    kv, itl, queries = RENAMES[release]
    assert (names.kv_usage, names.itl, names.prefix_queries) == (kv, itl, f"{queries}_total")
    assert names.prefix_hits == f"{queries.replace('queries', 'hits')}_total"


def test_releases_before_the_first_read_and_unparsable_ones() -> None:
    assert engine_metrics("vllm", "0.6.3") == VLLM[0][1]  # V0's names are the first row's
    assert engine_metrics("vllm", "nightly") == VLLM[-1][1]
    assert engine_metrics("vllm", "0.11.0rc2") == VLLM[-1][1]
    assert engine_metrics("sglang", "0.5.3") is SGLANG


def test_rows_are_in_release_order() -> None:
    from packaging.version import Version

    firsts = [Version(first) for first, _ in VLLM]
    assert firsts == sorted(firsts)


def test_every_name_for_0_32_is_in_a_real_vllm_0_32_scrape() -> None:
    exported = {
        line.split("{")[0].split(" ")[0] for line in CAPTURE.read_text().splitlines() if line[:1] != "#"
    }
    names = engine_metrics("vllm", "0.32.0")
    for field in fields(names):
        name = getattr(names, field.name)
        histogram = name is not None and name.endswith("_seconds")
        assert (f"{name}_bucket" if histogram else name) in exported, field.name
