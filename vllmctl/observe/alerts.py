"""The fleet's Prometheus alerting rules: thresholds from the inventory (its models' SLOs, min_available,
GPU counts, the gateway's drain timeout) where it has them, the documented defaults otherwise."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import yaml

from vllmctl.inventory.model import Inventory
from vllmctl.observe.fleet import DCGM, GATEWAY, JOB, RATE, ModelView, model_views, quantile
from vllmctl.ops.gpu_findings import RESET_XIDS

# Documented defaults (docs/status.md, Alerts), used where the inventory sets nothing.
ENGINE_DOWN_FOR = "1m"  # two failed scrapes at the 15 s interval and then some
KV_SATURATED = 0.95  # KV cache fraction in use beyond which new requests preempt running ones
KV_FOR = "5m"
QUEUE_P99_S = 5.0  # p99 queue time; a model's slo.ttft_p99_ms replaces it (queueing is part of TTFT)
QUEUE_FOR = "5m"
ERROR_RATE = 0.01  # share of gateway responses that are 5xx; a model's slo.max_error_rate replaces it
ERROR_FOR = "5m"
ENGINE_START_S = 1800  # an engine's start on a large model (weights, compile, warm-up), generously
GPU_FOR = "5m"
VALUE_2F = '{{ printf "%.2f" $value }}'  # an alert's value in its summary, two decimals
FM_SUCCESS, FM_NOT_SUPPORTED = 3, 0  # dcgmFabricManagerStatus_t: the two states that need nothing done


def _rule(name: str, expr: str, for_: str, severity: str, summary: str, **labels: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary},
    }


def engine_rules(views: list[ModelView], gateway: bool) -> list[dict[str, Any]]:
    rules = [
        _rule(
            "VllmctlEngineDown",
            f'up{{job="{JOB}", model!=""}} == 0',
            ENGINE_DOWN_FOR,
            "critical",
            "{{ $labels.model }} on {{ $labels.host }} ({{ $labels.instance }}) does not answer /metrics",
        )
    ]
    if gateway:
        rules.append(
            _rule(
                "VllmctlEngineNotReady",
                f'haproxy_server_status{{{GATEWAY}, state="DOWN"}} == 1',
                ENGINE_DOWN_FOR,
                "critical",
                "the gateway's /health check fails for {{ $labels.proxy }} server {{ $labels.server }}",
            )
        )
    for view in views:
        sel = f'{{job="{JOB}", model="{view.name}"}}'
        rules.append(
            _rule(
                "VllmctlBelowMinAvailable",
                f"sum by (model) (up{sel}) < {view.min_available}",
                ENGINE_DOWN_FOR,
                "critical",
                f"{{{{ $labels.model }}}} has {{{{ $value }}}} replicas up, fewer than its "
                f"min_available {view.min_available}",
                model=view.name,
            )
        )
        kv = view.series(lambda m: m.kv_usage, sel=sel)
        preempt = view.series(lambda m: m.preemptions, sel=sel)
        if kv and preempt:
            by = "by (job, instance, host, model)"
            rules.append(
                _rule(
                    "VllmctlKvCacheSaturated",
                    f"max {by} ({kv}) > {KV_SATURATED} and sum {by} (rate({preempt}[{RATE}])) > 0",
                    KV_FOR,
                    "warning",
                    f"{{{{ $labels.instance }}}}: KV cache over {KV_SATURATED:.0%} full and preempting",
                    model=view.name,
                )
            )
        queue = view.series(lambda m: m.queue_time, "_bucket", sel)
        if queue:
            slo = view.slo.get("ttft_p99_ms")
            limit = slo / 1000 if slo is not None else QUEUE_P99_S
            rules.append(
                _rule(
                    "VllmctlQueueTimeOverSlo",
                    f"{quantile(0.99, queue, 'instance, model')} > {limit:g}",
                    QUEUE_FOR,
                    "warning",
                    f"{{{{ $labels.instance }}}}: p99 queue time {VALUE_2F} s over {limit:g} s",
                    model=view.name,
                )
            )
    return rules


def gateway_rules(inventory: Inventory, views: list[ModelView]) -> list[dict[str, Any]]:
    gateway = inventory.gateway
    if gateway is None or gateway.metrics_port is None:
        return []
    rules = []
    for view in (view for view in views if view.gateway):
        limit = view.slo.get("max_error_rate", ERROR_RATE)
        backend = f'{GATEWAY}, proxy="{view.name}"'
        five = f'sum by (proxy) (rate(haproxy_backend_http_responses_total{{{backend}, code="5xx"}}[{RATE}]))'
        every = f"sum by (proxy) (rate(haproxy_backend_http_responses_total{{{backend}}}[{RATE}]))"
        rules.append(
            _rule(
                "VllmctlGateway5xx",
                f"{five} / ({every} > 0) > {limit:g}",
                ERROR_FOR,
                "critical",
                f"{{{{ $labels.proxy }}}}: {{{{ $value | humanizePercentage }}}} of responses are 5xx "
                f"(limit {limit:g})",
                model=view.name,
            )
        )
    rollout = f"{int(gateway.drain_timeout_s) + ENGINE_START_S}s"
    rules.append(
        _rule(
            "VllmctlServerLeftDrained",
            f'haproxy_server_status{{{GATEWAY}, state=~"DRAIN|MAINT"}} == 1',
            rollout,
            "warning",
            "{{ $labels.proxy }}/{{ $labels.server }} in {{ $labels.state }} longer than a rollout takes",
        )
    )
    return rules


def gpu_rules(inventory: Inventory) -> list[dict[str, Any]]:
    hosts = [host for host in inventory.hosts.values() if host.driver.dcgm_exporter]
    if not hosts:
        return []
    xid = f"DCGM_FI_DEV_XID_ERRORS{{{DCGM}}}"
    rules = [
        _rule(
            "VllmctlGpuXidNeedsReset",
            " or ".join(f"{xid} == {code}" for code in sorted(RESET_XIDS)),
            "0m",
            "critical",
            "{{ $labels.host }} GPU {{ $labels.gpu }}: Xid {{ $value }} needs a GPU reset or a reboot",
        ),
        _rule(
            "VllmctlGpuEccUncorrectable",
            f"increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{DCGM}}}[10m]) > 0"
            f" or DCGM_FI_DEV_ROW_REMAP_FAILURE{{{DCGM}}} > 0",
            "0m",
            "critical",
            "{{ $labels.host }} GPU {{ $labels.gpu }}: uncorrectable ECC (rows remapped or remap failed)",
        ),
        _rule(
            "VllmctlFabricManagerDown",
            f"DCGM_FI_DEV_FABRIC_MANAGER_STATUS{{{DCGM}}} != {FM_SUCCESS}"
            f" and DCGM_FI_DEV_FABRIC_MANAGER_STATUS{{{DCGM}}} != {FM_NOT_SUPPORTED}",
            GPU_FOR,
            "critical",
            "{{ $labels.host }} GPU {{ $labels.gpu }}: Fabric Manager status {{ $value }} (3 is success)",
        ),
    ]
    by_count: dict[int, list[str]] = defaultdict(list)
    for host in hosts:
        if host.gpus is not None:
            by_count[host.gpus.count].append(host.name)
    for count, names in sorted(by_count.items()):
        selector = f'{DCGM}, host=~"{"|".join(names)}"'
        rules.append(
            _rule(
                "VllmctlGpuCountDropped",
                f"count by (host) (DCGM_FI_DEV_GPU_TEMP{{{selector}}}) < {count}",
                GPU_FOR,
                "critical",
                f"{{{{ $labels.host }}}} shows {{{{ $value }}}} GPUs, the inventory has {count}",
            )
        )
    return rules


def rules(inventory: Inventory) -> dict[str, Any]:
    """The rules file's content: one group per concern."""
    views = model_views(inventory)
    gateway = inventory.gateway is not None and inventory.gateway.metrics_port is not None
    groups = [
        {"name": "vllmctl-engines", "rules": engine_rules(views, gateway)},
        {"name": "vllmctl-gateway", "rules": gateway_rules(inventory, views)},
        {"name": "vllmctl-gpus", "rules": gpu_rules(inventory)},
    ]
    return {"groups": [group for group in groups if group["rules"]]}


def to_yaml(content: dict[str, Any]) -> str:
    return yaml.safe_dump(content, sort_keys=False, width=1000)
