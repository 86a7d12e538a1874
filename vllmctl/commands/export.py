"""`vllmctl export prometheus INVENTORY`: Prometheus file-based service discovery for every engine port (and
the gateway's and DCGM Exporter's where enabled), the `scrape_configs` snippet that reads that file, or rules
recording each replica's prefix-cache hit rate; `export grafana` and `export alerts` write the dashboard (with
its Grafana provisioning files) and the alerting rules that vllmctl/observe/ builds.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vllmctl.console import Ui
from vllmctl.errors import EXIT_OK, InputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.observe import alerts, dashboard
from vllmctl.ops.dcgm import EXPORTER_PORT
from vllmctl.runner.fleet.hosts import model_plans, planned_inventory, served_plan
from vllmctl.tasks.desired import HostContext, ModelPlan

JOB = "vllmctl"
DEFAULT_SD_FILE = "/etc/prometheus/file_sd/vllmctl.json"
DEFAULT_PROMETHEUS_URL = "http://localhost:9090"
DEFAULT_DASHBOARDS_DIR = "/var/lib/grafana/dashboards/vllmctl"
DASHBOARD_FILE = "vllmctl-fleet.json"
# Engines answer /metrics on their serving port; 15 s is Prometheus's own default scrape interval.
SCRAPE_INTERVAL = "15s"
# Per replica: an engine port is one `instance`; vLLM's counters are summed over its data-parallel engines.
BY = "sum by (job, instance, host, model)"
RATE_WINDOW = "5m"


def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def service_discovery(
    inventory: Inventory, plans: Mapping[str, Mapping[str, ModelPlan]] | None = None
) -> list[dict[str, Any]]:
    """One target group per (host, model), listing each replica's address:port, in inventory order; a
    multi-node model one only, its group's head, labelled with the group.

    `plans` (host -> model -> plan) gives the replica ports `apply` deploys; without it each model runs
    one replica on its own port, as `apply` does today.
    """
    groups: list[dict[str, Any]] = []
    for model in inventory.models.values():
        if model.cluster is not None:  # one engine over the group: only its head serves, on the model port
            head = inventory.hosts[model.cluster.hosts[0]]
            engine = HostContext(inventory, head, {}).engine(model).name
            labels = {"job": JOB, "model": model.name, "host": head.name, "engine": engine}
            labels["group"] = model.cluster.group
            groups.append({"targets": [_hostport(head.address, model.port)], "labels": labels})
            continue
        for host_name in model.hosts:
            host = inventory.hosts[host_name]
            context = HostContext(inventory, host, (plans or {}).get(host_name, {}))
            replicas = context.plan(model).replicas
            labels = {
                "job": JOB,
                "model": model.name,
                "host": host.name,
                "engine": context.engine(model).name,
            }
            targets = [_hostport(host.address, replica.port) for replica in replicas]
            groups.append({"targets": targets, "labels": labels})
    gateway = inventory.gateway
    if gateway is not None and gateway.metrics_port is not None:  # HAProxy's exporter, also on /metrics
        for name in gateway.hosts:
            target = _hostport(inventory.hosts[name].address, gateway.metrics_port)
            groups.append({"targets": [target], "labels": {"job": JOB, "host": name, "component": "gateway"}})
    for host in inventory.hosts.values():  # driver.dcgm_exporter: NVIDIA's packaged exporter, GPU metrics
        if host.driver.dcgm_exporter:
            labels = {"job": JOB, "host": host.name, "component": "dcgm-exporter"}
            groups.append({"targets": [_hostport(host.address, EXPORTER_PORT)], "labels": labels})
    return groups


def scrape_config(sd_file: str) -> str:
    """A `scrape_configs` YAML snippet whose targets come from the service discovery file."""
    config = {
        "scrape_configs": [
            {
                "job_name": JOB,
                "metrics_path": "/metrics",
                "scrape_interval": SCRAPE_INTERVAL,
                "file_sd_configs": [{"files": [sd_file]}],
            }
        ]
    }
    return yaml.safe_dump(config, sort_keys=False)


def recording_rules() -> str:
    """A Prometheus rules file: each replica's prefix-cache hit rate (cached / queried prompt tokens) over
    the last RATE_WINDOW and since its engine started; else vLLM V0's hit-rate gauge."""
    hits, queries = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
    selector = f'{{job="{JOB}"}}'
    gauge = f"max by (job, instance, host, model) (vllm:gpu_prefix_cache_hit_rate{selector})"
    recent = (
        f"{BY} (rate({hits}{selector}[{RATE_WINDOW}]))"
        f" / ({BY} (rate({queries}{selector}[{RATE_WINDOW}])) > 0)"
        f" or {gauge}"
    )
    lifetime = f"{BY} ({hits}{selector}) / ({BY} ({queries}{selector}) > 0) or {gauge}"
    rules = [
        {"record": f"vllmctl:prefix_cache_hit_rate:rate{RATE_WINDOW}", "expr": recent},
        {"record": "vllmctl:prefix_cache_hit_rate:lifetime", "expr": lifetime},
    ]
    return yaml.safe_dump({"groups": [{"name": JOB, "rules": rules}]}, sort_keys=False, width=1000)


def _write_atomically(path: Path, text: str) -> None:
    # Prometheus re-reads the file when it changes; a rename means it never sees half a file.
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        raise InputError(
            f"cannot write {path}: {exc.strerror or exc}",
            "choose a --output path in a directory that exists and that you can write to",
        ) from exc


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "export",
        help="export the fleet's engine endpoints, dashboard and alerts for monitoring",
        description="prometheus: file-based service discovery JSON for every engine port of the "
        "inventory, (--format scrape-config) the scrape_configs snippet that reads it, or (--format rules) "
        "recording rules for each replica's prefix-cache hit rate. grafana: the fleet's dashboard JSON "
        "(with --output-dir, also Grafana's datasource and dashboard provisioning files). alerts: "
        "Prometheus alerting rules with the inventory's thresholds.",
    )
    parser.add_argument("target", choices=["prometheus", "grafana", "alerts"], help="what to export")
    parser.add_argument("inventory", metavar="INVENTORY", help="inventory file")
    parser.add_argument(
        "--format",
        choices=["file-sd", "scrape-config", "rules"],
        default="file-sd",
        help="file-sd: the targets JSON (default); scrape-config: a scrape_configs YAML snippet; rules: a "
        "rule_files file recording vllmctl:prefix_cache_hit_rate:rate5m and :lifetime per replica",
    )
    parser.add_argument("--output", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    parser.add_argument(
        "--sd-file",
        metavar="PATH",
        help=f"the targets file the scrape-config snippet points at (default: {DEFAULT_SD_FILE})",
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        help="grafana: write DIR/"
        + DASHBOARD_FILE
        + " and DIR/provisioning/{datasources,dashboards}/vllmctl.yaml",
    )
    parser.add_argument(
        "--prometheus-url",
        metavar="URL",
        help=f"grafana: the datasource's Prometheus (default: {DEFAULT_PROMETHEUS_URL})",
    )
    parser.add_argument(
        "--dashboards-dir",
        metavar="PATH",
        help=f"grafana: where Grafana reads the dashboard JSON (default: {DEFAULT_DASHBOARDS_DIR})",
    )
    parser.set_defaults(func=run)


def _grafana(args: argparse.Namespace, inventory: Inventory, ui: Ui) -> int:
    board = dashboard.to_json(dashboard.build(inventory))
    if not args.output_dir:
        return _emit(args.output, board, "the dashboard", ui)
    out = Path(args.output_dir)
    files = {DASHBOARD_FILE: board}
    provisioning = dashboard.provisioning(
        args.dashboards_dir or DEFAULT_DASHBOARDS_DIR, args.prometheus_url or DEFAULT_PROMETHEUS_URL
    )
    files |= {f"provisioning/{name}": text for name, text in provisioning.items()}
    for name, text in files.items():
        path = out / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot create {path.parent}: {exc.strerror or exc}", "choose another --output-dir"
            ) from exc
        _write_atomically(path, text)
    ui.info(f"wrote the dashboard and its provisioning files to {out}")
    return EXIT_OK


def _alerts(args: argparse.Namespace, inventory: Inventory, ui: Ui) -> int:
    return _emit(args.output, alerts.to_yaml(alerts.rules(inventory)), "the alerting rules", ui)


def _emit(output: str | None, text: str, what: str, ui: Ui) -> int:
    """One document to `--output`, or to standard output without it."""
    if output:
        _write_atomically(Path(output), text)
        ui.info(f"wrote {what} to {output}")
    else:
        ui.data(text.rstrip("\n"))
    return EXIT_OK


def run(args: argparse.Namespace, ui: Ui) -> int:
    inventory = planned_inventory(load_inventory(args.inventory))  # a bad file fails early, always
    if args.target == "grafana":
        return _grafana(args, inventory, ui)
    if args.target == "alerts":
        return _alerts(args, inventory, ui)
    if args.format in ("scrape-config", "rules"):
        rules = args.format == "rules"
        snippet = recording_rules() if rules else scrape_config(args.sd_file or DEFAULT_SD_FILE)
        if args.output:
            _write_atomically(Path(args.output), snippet)
            ui.info(f"wrote the {'recording rules' if rules else 'scrape config'} to {args.output}")
        else:
            ui.data(snippet.rstrip("\n"))
        return EXIT_OK
    groups = service_discovery(inventory, model_plans(served_plan(inventory)))
    if args.output:
        _write_atomically(Path(args.output), json.dumps(groups, indent=2, sort_keys=True) + "\n")
        targets = sum(len(group["targets"]) for group in groups)
        ui.info(f"wrote {targets} targets in {len(groups)} groups to {args.output}")
    else:
        ui.json(groups)
    return EXIT_OK
