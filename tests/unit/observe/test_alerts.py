"""The alerting rules: every alert the fleet calls for, its threshold from the inventory where it has one
(SLOs, min_available, GPU counts, the drain timeout) and the documented default otherwise."""

from __future__ import annotations

from typing import Any

import yaml

from vllmctl.inventory.model import Inventory
from vllmctl.observe import alerts
from vllmctl.ops.gpu_findings import RESET_XIDS


def _by_name(inventory: Inventory) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for group in alerts.rules(inventory)["groups"]:
        for rule in group["rules"]:
            found.setdefault(rule["alert"], []).append(rule)
    return found


def _of(rules: list[dict[str, Any]], model: str) -> dict[str, Any]:
    (rule,) = [rule for rule in rules if rule["labels"].get("model") == model]
    return rule


def test_every_alert_is_there(fleet: Inventory) -> None:
    assert set(_by_name(fleet)) == {
        "VllmctlEngineDown",
        "VllmctlEngineNotReady",
        "VllmctlBelowMinAvailable",
        "VllmctlKvCacheSaturated",
        "VllmctlQueueTimeOverSlo",
        "VllmctlGateway5xx",
        "VllmctlServerLeftDrained",
        "VllmctlGpuXidNeedsReset",
        "VllmctlGpuEccUncorrectable",
        "VllmctlFabricManagerDown",
        "VllmctlGpuCountDropped",
    }


def test_min_available_is_each_models_own(fleet: Inventory) -> None:
    rules = _by_name(fleet)["VllmctlBelowMinAvailable"]
    assert _of(rules, "llama-8b")["expr"] == 'sum by (model) (up{job="vllmctl", model="llama-8b"}) < 2'
    assert _of(rules, "old-model")["expr"].endswith(") < 1")
    assert _of(rules, "llama-8b")["for"] == alerts.ENGINE_DOWN_FOR


def test_queue_time_threshold_is_the_ttft_slo_else_the_default(fleet: Inventory) -> None:
    rules = _by_name(fleet)["VllmctlQueueTimeOverSlo"]
    assert _of(rules, "llama-8b")["expr"] == (
        "histogram_quantile(0.99, sum by (le, instance, model) (rate(vllm:request_queue_time_seconds_bucket"
        '{job="vllmctl", model="llama-8b"}[5m]))) > 1.5'
    )
    assert _of(rules, "old-model")["expr"].endswith(f"> {alerts.QUEUE_P99_S:g}")
    assert [rule["labels"]["model"] for rule in rules] == ["llama-8b", "old-model"]  # SGLang: no such metric


def test_kv_saturation_uses_each_releases_name(fleet: Inventory) -> None:
    rules = _by_name(fleet)["VllmctlKvCacheSaturated"]
    assert "vllm:kv_cache_usage_perc{" in _of(rules, "llama-8b")["expr"]
    assert "vllm:gpu_cache_usage_perc{" in _of(rules, "old-model")["expr"]
    assert "sglang:token_usage{" in _of(rules, "qwen-sg")["expr"]
    assert f"> {alerts.KV_SATURATED}" in _of(rules, "llama-8b")["expr"]
    assert "rate(vllm:num_preemptions_total{" in _of(rules, "llama-8b")["expr"]


def test_gateway_5xx_is_the_max_error_rate_slo_else_the_default(fleet: Inventory) -> None:
    rules = _by_name(fleet)["VllmctlGateway5xx"]
    assert _of(rules, "llama-8b")["expr"].endswith("> 0) > 0.02")
    assert _of(rules, "old-model")["expr"].endswith(f"> 0) > {alerts.ERROR_RATE:g}")
    assert 'proxy="llama-8b", code="5xx"' in _of(rules, "llama-8b")["expr"]


def test_a_server_left_drained_waits_the_drain_timeout_and_an_engine_start(fleet: Inventory) -> None:
    (rule,) = _by_name(fleet)["VllmctlServerLeftDrained"]
    assert rule["for"] == f"{300 + alerts.ENGINE_START_S}s"
    assert 'state=~"DRAIN|MAINT"' in rule["expr"]


def test_gpu_rules_cover_the_dcgm_hosts_with_their_counts(fleet: Inventory) -> None:
    found = _by_name(fleet)
    (count,) = found["VllmctlGpuCountDropped"]
    assert count["expr"] == (
        'count by (host) (DCGM_FI_DEV_GPU_TEMP{job="vllmctl", component="dcgm-exporter", '
        'host=~"gpu-01|gpu-02"}) < 8'
    )
    (xid,) = found["VllmctlGpuXidNeedsReset"]
    assert all(f" == {code}" in xid["expr"] for code in RESET_XIDS)
    assert "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" in found["VllmctlGpuEccUncorrectable"][0]["expr"]
    assert "DCGM_FI_DEV_FABRIC_MANAGER_STATUS" in found["VllmctlFabricManagerDown"][0]["expr"]


def test_without_gateway_exporter_or_dcgm_only_engine_rules(fleet: Inventory) -> None:
    from dataclasses import replace

    hosts = {
        name: replace(host, driver=replace(host.driver, dcgm_exporter=False))
        for name, host in fleet.hosts.items()
    }
    bare = replace(fleet, gateway=None, hosts=hosts)
    assert set(_by_name(bare)) == {
        "VllmctlEngineDown",
        "VllmctlBelowMinAvailable",
        "VllmctlKvCacheSaturated",
        "VllmctlQueueTimeOverSlo",
    }


def test_the_file_is_a_rules_file(fleet: Inventory) -> None:
    loaded = yaml.safe_load(alerts.to_yaml(alerts.rules(fleet)))
    assert [group["name"] for group in loaded["groups"]] == [
        "vllmctl-engines",
        "vllmctl-gateway",
        "vllmctl-gpus",
    ]
