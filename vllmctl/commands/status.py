"""`vllmctl status INVENTORY`: per host and model, the service, release, health, load, KV cache and advice.

Service state and release pointers come over SSH (one round trip per host); health and `/metrics` come
straight from each server over HTTP, scraped twice `--interval` apart so rates and advice have evidence.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from rich.live import Live

from vllmctl.advice import advise
from vllmctl.bench.endpoints import Endpoint, endpoints_for
from vllmctl.console import Ui
from vllmctl.desired import unit_name
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.metrics import EngineMetrics, parse_metrics, rates
from vllmctl.planner.inventory_plan import InventoryPlan
from vllmctl.runner.fleet import gather_fleet_facts, host_contexts, select_hosts, served_plan
from vllmctl.status_view import ModelStatus, findings, status_json, status_table

HTTP_TIMEOUT_S = 5.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("status", help="show serving status, live metrics and tuning advice")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("--limit", help="comma list of hosts or groups")
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between the two scrapes")
    parser.add_argument("--watch", action="store_true", help="refresh until interrupted")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per host for SSH facts")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class Scrape:
    healthy: bool | None
    metrics: EngineMetrics | None
    error: str = ""


def scrape(client: httpx.Client, endpoint: Endpoint) -> Scrape:
    try:
        healthy = client.get(f"{endpoint.base_url}/health").status_code == 200
        response = client.get(f"{endpoint.base_url}/metrics")
        response.raise_for_status()
    except httpx.HTTPError as exc:
        return Scrape(False, None, f"{type(exc).__name__}: {exc}")
    try:
        by_model = parse_metrics(response.text)
    except VllmctlError as exc:
        return Scrape(healthy, None, exc.message)
    metrics = by_model.get(endpoint.model) or next(iter(by_model.values()), None)
    return Scrape(healthy, metrics)


def scrape_all(endpoints: Sequence[Endpoint]) -> list[Scrape]:
    with (
        httpx.Client(timeout=HTTP_TIMEOUT_S) as client,
        ThreadPoolExecutor(max_workers=max(1, min(32, len(endpoints)))) as pool,
    ):
        return list(pool.map(lambda e: scrape(client, e), endpoints))


def build_statuses(
    inv: Inventory,
    endpoints: Sequence[Endpoint],
    facts: Mapping[str, Mapping[str, Any]],
    plan: InventoryPlan,
    before: Sequence[Scrape],
    after: Sequence[Scrape],
    dt_s: float,
) -> list[ModelStatus]:
    """Pure: endpoints, host facts, the plan and two scrapes in; one ModelStatus per endpoint out."""
    plans = {(e.host, e.model): e.plan for e in plan.entries if e.plan is not None}
    statuses = []
    for endpoint, first, last in zip(endpoints, before, after, strict=True):
        gathered = facts.get(endpoint.host, {})
        model = inv.models[endpoint.model]
        port = model.port + endpoint.replica
        if "error" in gathered:
            statuses.append(
                ModelStatus(endpoint.host, endpoint.model, port, error=f"unreachable: {gathered['error']}")
            )
            continue
        host_facts = gathered.get("facts", {})
        unit = (host_facts.get("units") or {}).get(unit_name(endpoint.model, endpoint.replica), {})
        release = (host_facts.get("releases") or {}).get("current")
        deployment = plans.get((endpoint.host, endpoint.model))
        engine = (model.engine or inv.hosts[endpoint.host].engine).name
        engine_args = dict(deployment.engine_args) if deployment else dict(model.engine_args)
        change = rates(first.metrics, last.metrics, dt_s) if first.metrics and last.metrics else None
        snapshots = [m for m in (first.metrics, last.metrics) if m is not None]
        statuses.append(
            ModelStatus(
                host=endpoint.host,
                model=endpoint.model,
                port=port,
                service_state=str(unit.get("active_state", "not installed")),
                release=release,
                healthy=last.healthy,
                metrics=last.metrics,
                rates=change,
                advice=tuple(advise(engine, engine_args, snapshots, change)),
                planned_kv_tokens=_planned_tokens(deployment),
                error=last.error if last.metrics is None else "",
            )
        )
    return statuses


def _planned_tokens(deployment: Any) -> int | None:
    tokens = getattr(getattr(deployment, "memory", None), "kv_cache_tokens", None)
    return int(tokens) if tokens is not None else None


def _gather(
    args: argparse.Namespace, inv: Inventory, hosts: list[str], plan: InventoryPlan
) -> list[ModelStatus]:
    endpoints = endpoints_for(inv, hosts, args.model, plan.replica_counts())
    facts = gather_fleet_facts(host_contexts(inv, hosts, {}), ("units", "releases"), args.timeout, 16)
    first = scrape_all(endpoints)
    started = time.monotonic()
    time.sleep(args.interval)
    last = scrape_all(endpoints)
    return build_statuses(inv, endpoints, facts, plan, first, last, time.monotonic() - started)


def run(args: argparse.Namespace, ui: Ui) -> int:
    inv = load_inventory(args.inventory)
    hosts = select_hosts(inv, args.limit)
    plan = served_plan(inv)
    if args.watch and not args.json:
        with Live(status_table([]), console=ui.out, auto_refresh=False) as live:
            while True:
                statuses = _gather(args, inv, hosts, plan)
                live.update(status_table(statuses), refresh=True)
    statuses = _gather(args, inv, hosts, plan)
    if args.json:
        ui.json(status_json(statuses))
    else:
        ui.table(status_table(statuses))
        for line in findings(statuses):
            ui.info(line)
    return EXIT_OK if statuses and all(s.ok for s in statuses) else EXIT_FAILURE
