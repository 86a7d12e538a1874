"""The dashboard, checked through Grafana's SDK: built, serialised, parsed back; one collapsed row per model
with its replica variable; every panel queries the labels `export prometheus` writes, with the metric names of
the release its model runs; the provisioning files load it."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel
from grafana_foundation_sdk.models.prometheus import Dataquery

from vllmctl.commands.export import JOB, service_discovery
from vllmctl.inventory.model import Inventory
from vllmctl.observe import fleet as observe_fleet
from vllmctl.observe.dashboard import DATASOURCE_UID, build, provisioning, to_json


def _parsed(inventory: Inventory) -> tuple[Dashboard, dict[str, Any]]:
    register_default_plugins()
    text = to_json(build(inventory))
    raw = json.loads(text)
    board = Dashboard.from_json(raw)
    assert json.loads(to_json(Dashboard.from_json(json.loads(to_json(board))))) == json.loads(to_json(board))
    return board, raw


def _rows(board: Dashboard) -> list[RowPanel]:
    assert board.panels is not None
    assert all(isinstance(panel, RowPanel) for panel in board.panels)
    return [panel for panel in board.panels if isinstance(panel, RowPanel)]


def _queries(panel: Panel) -> list[str]:
    assert panel.targets, panel.title
    assert all(isinstance(target, Dataquery) for target in panel.targets)
    return [target.expr for target in panel.targets if isinstance(target, Dataquery)]


def test_the_job_label_is_the_one_export_prometheus_writes() -> None:
    assert observe_fleet.JOB == JOB


def test_one_collapsed_row_per_model_each_with_its_replica_variable(fleet: Inventory) -> None:
    board, raw = _parsed(fleet)
    rows = _rows(board)
    assert [row.title.split(" (")[0] for row in rows] == list(fleet.models)
    assert all(row.collapsed for row in rows)
    assert rows[0].title == "llama-8b (vllm 0.32.0)"
    assert rows[1].title == "old-model (vllm 0.9.0)"
    variables = {v["name"]: v for v in raw["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for index, (row, model) in enumerate(zip(rows, fleet.models, strict=True)):
        name = f"replica_{index}_{model.replace('-', '_')}"
        assert variables[name]["query"] == f'label_values(up{{job="vllmctl", model="{model}"}}, instance)'
        assert variables[name]["multi"] and variables[name]["includeAll"]
        engine = [
            q for panel in row.panels for q in _queries(panel) if "DCGM" not in q and "haproxy" not in q
        ]
        assert engine and all(f"${name}" in q for q in engine), row.title


def test_every_panel_queries_labels_export_prometheus_writes(fleet: Inventory) -> None:
    board, _ = _parsed(fleet)
    sd = service_discovery(fleet)
    models = {group["labels"].get("model") for group in sd} - {None}
    components = {group["labels"].get("component") for group in sd} - {None}
    assert components == {"gateway", "dcgm-exporter"}
    for row in _rows(board):
        for panel in row.panels:
            for query in _queries(panel):
                assert f'job="{JOB}"' in query, (panel.title, query)
                model = re.search(r'model="([^"]+)"', query)
                component = re.search(r'component="([^"]+)"', query)
                proxy = re.search(r'proxy="([^"]+)"', query)
                assert model or component, query
                assert model is None or model.group(1) in models
                assert component is None or component.group(1) in components
                assert proxy is None or proxy.group(1) in fleet.models


def _titles(board: Dashboard, index: int) -> list[str]:
    return [panel.title or "" for panel in _rows(board)[index].panels]


def test_panels_follow_what_each_model_has(fleet: Inventory) -> None:
    board, _ = _parsed(fleet)
    llama, old, sglang = _titles(board, 0), _titles(board, 1), _titles(board, 2)
    assert llama == [
        "Gateway requests and 5xx",
        "Gateway 5xx per server",
        "Gateway server state",
        "Gateway queue per server",
        "Requests finished per replica",
        "Requests aborted or failed per replica",
        "Time to first token",
        "Inter-token latency",
        "End-to-end latency",
        "Requests running and waiting",
        "KV cache usage",
        "Preemptions per second",
        "Prefix-cache hit rate",
        "Tokens per second",
        "Engine up and restarts (vllm 0.32.0)",
        "GPU utilisation",
        "GPU memory used",
        "GPU temperature",
        "GPU power",
        "GPU last Xid",
        "GPU uncorrectable ECC (remapped rows)",
    ]
    assert old[0] == "Gateway requests and 5xx" and "GPU utilisation" not in old  # no DCGM Exporter there
    assert not any(title.startswith("Gateway") for title in sglang)  # not behind the gateway
    assert "End-to-end latency" not in sglang and "Prefix-cache hit rate" not in sglang


def _all_queries(board: Dashboard, index: int) -> str:
    return "\n".join(q for panel in _rows(board)[index].panels for q in _queries(panel))


def test_each_row_uses_its_release_metric_names(fleet: Inventory) -> None:
    board, _ = _parsed(fleet)
    new, old, sglang = (_all_queries(board, i) for i in range(3))
    assert "vllm:kv_cache_usage_perc{" in new and "vllm:inter_token_latency_seconds_bucket{" in new
    assert "vllm:prefix_cache_hits_total{" in new and "gpu_cache_usage_perc" not in new
    assert "vllm:gpu_cache_usage_perc{" in old and "vllm:time_per_output_token_seconds_bucket{" in old
    assert "vllm:gpu_prefix_cache_queries_total{" in old and "kv_cache_usage_perc" not in old
    assert "sglang:token_usage{" in sglang and "vllm:" not in sglang


def test_a_model_whose_hosts_run_two_releases_queries_both_names(fleet: Inventory) -> None:
    from dataclasses import replace

    from vllmctl.inventory.model import EngineSpec

    hosts = dict(fleet.hosts)
    hosts["gpu-02"] = replace(hosts["gpu-02"], engine=EngineSpec(version="0.9.0"))
    board, _ = _parsed(replace(fleet, hosts=hosts))
    queries = _all_queries(board, 0)
    assert "(vllm:gpu_cache_usage_perc{" in queries and " or vllm:kv_cache_usage_perc{" in queries
    assert _rows(board)[0].title == "llama-8b (vllm 0.32.0, vllm 0.9.0)"


def test_provisioning_points_grafana_at_prometheus_and_the_dashboard_folder() -> None:
    files = provisioning("/var/lib/grafana/dashboards/vllmctl", "http://prom:9090")
    datasource = yaml.safe_load(files["datasources/vllmctl.yaml"])["datasources"][0]
    assert datasource["uid"] == DATASOURCE_UID
    assert (datasource["type"], datasource["url"]) == ("prometheus", "http://prom:9090")
    provider = yaml.safe_load(files["dashboards/vllmctl.yaml"])["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards/vllmctl"
