"""The fleet's Grafana dashboard, built with Grafana's own SDK: one collapsed row per model, each with its
replica selector, and the provisioning files that load it into Grafana."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement, TooltipDisplayMode
from grafana_foundation_sdk.models.dashboard import Dashboard, DataSourceRef, VariableRefresh

from vllmctl.inventory.model import Inventory
from vllmctl.observe.fleet import JOB, ModelView, model_views
from vllmctl.observe.panels import PanelSpec, engine_panels, gateway_panels, gpu_panels

UID = "vllmctl-fleet"
DATASOURCE_UID = "vllmctl-prometheus"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


def replica_variable(view: ModelView, index: int) -> str:
    """The row's replica variable: a Grafana name (letters, digits, underscores) unique per model."""
    return f"replica_{index}_{re.sub(r'[^A-Za-z0-9_]', '_', view.name)}"


def _panel(spec: PanelSpec) -> timeseries.Panel:
    title, unit, queries = spec
    panel = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(8)
    panel.legend(
        gc.VizLegendOptions()
        .display_mode(LegendDisplayMode.LIST)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
    )
    panel.tooltip(gc.VizTooltipOptions().mode(TooltipDisplayMode.MULTI))
    for ref, (legend, expr) in zip("ABCDEFGH", queries, strict=False):
        panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref))
    return panel


def _row(view: ModelView, variable: str) -> gd.Row:
    row = gd.Row(f"{view.name} ({', '.join(view.releases)})").collapsed(True)
    for spec in (*gateway_panels(view), *engine_panels(view, variable), *gpu_panels(view)):
        row.with_panel(_panel(spec))
    return row


def build(inventory: Inventory) -> Dashboard:
    """The dashboard object, for the SDK's own checks and for `to_json`."""
    board = (
        gd.Dashboard("vllmctl fleet")
        .uid(UID)
        .tags(["vllmctl"])
        .time("now-1h", "now")
        .refresh("30s")
        .with_variable(gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    for index, view in enumerate(model_views(inventory)):
        variable = replica_variable(view, index)
        board.with_variable(
            gd.QueryVariable(variable)
            .label(f"{view.name} replicas")
            .datasource(DATASOURCE)
            .query(f'label_values(up{{job="{JOB}", model="{view.name}"}}, instance)')
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
        )
        board.with_row(_row(view, variable))
    return board.build()


def to_json(board: Dashboard) -> str:
    return json.dumps(board, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def provisioning(dashboards_dir: str, prometheus_url: str) -> dict[str, str]:
    """Grafana's provisioning files, by their path under its provisioning folder: a Prometheus datasource
    and a dashboard provider reading `dashboards_dir` (where the dashboard JSON goes)."""
    datasource: dict[str, Any] = {
        "apiVersion": 1,
        "datasources": [
            {"name": "vllmctl Prometheus", "uid": DATASOURCE_UID, "type": "prometheus", "access": "proxy"}
            | {"url": prometheus_url, "isDefault": False, "editable": True}
        ],
    }
    provider: dict[str, Any] = {
        "apiVersion": 1,
        "providers": [
            {
                "name": "vllmctl",
                "folder": "vllmctl",
                "type": "file",
                "disableDeletion": False,
                "updateIntervalSeconds": 30,
                "options": {"path": dashboards_dir, "foldersFromFilesStructure": False},
            }
        ],
    }
    return {
        "datasources/vllmctl.yaml": yaml.safe_dump(datasource, sort_keys=False),
        "dashboards/vllmctl.yaml": yaml.safe_dump(provider, sort_keys=False),
    }
