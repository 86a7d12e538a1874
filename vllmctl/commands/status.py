"""`vllmctl status INVENTORY`: per host and model, the service, release, health, load, KV cache and advice.

Service state, release pointers and the current release's manifest (planned vs measured KV) come over SSH;
health and `/metrics` straight from each server over HTTP, scraped twice `--interval` apart so rates and
advice have evidence. `collect` is also what `plan --from-status` reads. A multi-node model is one entry
on its group's head, with its Ray units and `ray status` (runner/cluster.py) beside it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from rich.live import Live

from vllmctl.bench.endpoints import Endpoint, endpoints_for
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.paths import RELEASES_DIR
from vllmctl.planner.inventory_plan import InventoryPlan
from vllmctl.releases.host import MANIFEST
from vllmctl.releases.kv import recorded_kv
from vllmctl.runner.cluster import group_states
from vllmctl.runner.fleet import (
    host_contexts,
    on_each_host,
    planned_inventory,
    runs_on_cpu,
    select_hosts,
    served_plan,
)
from vllmctl.runner.remote import SshRemote
from vllmctl.status.advice import advise
from vllmctl.status.group import group_models, with_groups
from vllmctl.status.metrics import EngineMetrics, parse_metrics, rates
from vllmctl.status.model import ModelStatus
from vllmctl.status.view import findings, status_json, status_screen, status_table
from vllmctl.tasks.desired import HostContext, unit_name

HTTP_TIMEOUT_S = 5.0
CURRENT_MANIFEST = f"{RELEASES_DIR}/current/{MANIFEST}"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("status", help="show serving status, live metrics and tuning advice")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("--limit", help="comma list of hosts or groups")
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between the two scrapes, which rates cover (default 1)",
    )
    parser.add_argument(
        "--watch", action="store_true", help="refresh until Ctrl-C (with --json: one JSON document per line)"
    )
    parser.add_argument(
        "--every",
        type=float,
        default=5.0,
        help="with --watch: seconds from one round to the next (default 5)",
    )
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


def _json_or_none(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def gather_hosts(contexts: Mapping[str, HostContext], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Per host {"facts": units and release pointers, "manifest": the current release's} or {"error"}."""

    def one(remote: SshRemote) -> dict[str, Any]:
        facts = remote.gather({"units": (), "releases": ()}, timeout_s)
        return {"facts": facts, "manifest": _json_or_none(remote.read_file(CURRENT_MANIFEST, timeout_s))}

    return on_each_host(contexts, one, forks=16)


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
    between: Sequence[Sequence[Scrape]] = (),
) -> list[ModelStatus]:
    """Pure: endpoints, host facts, the plan and the scrapes in; one ModelStatus per endpoint out.

    Rates come from the first and last scrape (`dt_s` apart); advice reads every scrape, `between` too.
    """
    plans = {(e.host, e.model): e.plan for e in plan.entries if e.plan is not None}
    statuses = []
    for index, (endpoint, first, last) in enumerate(zip(endpoints, before, after, strict=True)):
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
        scrapes = (first, *(round_[index] for round_ in between), last)
        answered = [scraped for scraped in scrapes if scraped.metrics is not None]
        snapshots = [scraped.metrics for scraped in answered if scraped.metrics is not None]
        # a busy server can miss one scrape's deadline: the latest answer stands for it
        latest = answered[-1] if answered else last
        on_cpu = runs_on_cpu(inv, endpoint.host, endpoint.model)
        predicted, measured = recorded_kv(gathered.get("manifest"), endpoint.model, endpoint.replica)
        statuses.append(
            ModelStatus(
                host=endpoint.host,
                model=endpoint.model,
                port=port,
                service_state=str(unit.get("active_state", "not installed")),
                release=release,
                healthy=latest.healthy,
                metrics=latest.metrics,
                rates=change,
                advice=tuple(advise(engine, engine_args, snapshots, change, on_cpu=on_cpu)),
                planned_kv_tokens=predicted if predicted is not None else _planned_tokens(deployment),
                measured_kv_tokens=measured,
                error=latest.error if latest.metrics is None else "",
            )
        )
    return statuses


def _planned_tokens(deployment: Any) -> int | None:
    tokens = getattr(getattr(deployment, "memory", None), "kv_cache_tokens", None)
    return int(tokens) if tokens is not None else None


def collect(
    inv: Inventory,
    hosts: list[str],
    plan: InventoryPlan,
    models: Sequence[str] = (),
    interval_s: float = 1.0,
    timeout_s: float = 30.0,
    samples: int = 2,
) -> list[ModelStatus]:
    """Facts over SSH, then `samples` scrapes spread over `interval_s`: one ModelStatus per engine process.

    More samples make "requests wait" and "the batch is full" less a matter of when a scrape lands (a
    gauge read right after requests finished shows a batch that the next step refills).
    """
    endpoints = endpoints_for(inv, hosts, list(models), plan.replica_counts())
    facts = gather_hosts(host_contexts(inv, hosts, {}), timeout_s)
    first = scrape_all(endpoints)
    started = time.monotonic()
    between = []
    for _ in range(max(samples, 2) - 2):
        time.sleep(interval_s / (max(samples, 2) - 1))
        between.append(scrape_all(endpoints))
    time.sleep(interval_s / (max(samples, 2) - 1))
    last = scrape_all(endpoints)
    dt_s = time.monotonic() - started
    return build_statuses(inv, endpoints, facts, plan, first, last, dt_s, between)


def _gather(
    args: argparse.Namespace, inv: Inventory, hosts: list[str], plan: InventoryPlan
) -> list[ModelStatus]:
    groups = group_models(inv, hosts, args.model)
    if not groups:
        return collect(inv, hosts, plan, args.model, args.interval, args.timeout)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the groups' SSH overlaps the scrapes' interval
        states = pool.submit(group_states, inv, groups, args.timeout)
        statuses = collect(inv, hosts, plan, args.model, args.interval, args.timeout)
        return with_groups(statuses, states.result())


def watch(
    gather: Callable[[], list[ModelStatus]],
    show: Callable[[list[ModelStatus]], None],
    every_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ModelStatus]:
    """Gather and show a round every `every_s` seconds until Ctrl-C; the last complete round is returned."""
    last: list[ModelStatus] = []
    try:
        while True:
            started = clock()
            statuses = gather()
            show(statuses)
            last = statuses
            sleep(max(0.0, every_s - (clock() - started)))
    except KeyboardInterrupt:
        return last


def _show_round(args: argparse.Namespace, ui: Ui, live: Live | None) -> Callable[[list[ModelStatus]], None]:
    """A terminal redraws one screen in place; JSON and piped text get each round after the one before."""

    def show(statuses: list[ModelStatus]) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if args.json:
            ui.json_line({"time": stamp, **status_json(statuses)})
            return
        screen = status_screen(statuses, f"{stamp}  every {args.every:g}s, Ctrl-C to stop")
        if live is None:
            ui.out.print(screen)
        else:
            live.update(screen, refresh=True)

    return show


def run(args: argparse.Namespace, ui: Ui) -> int:
    inv = planned_inventory(load_inventory(args.inventory))
    hosts = select_hosts(inv, args.limit)
    plan = served_plan(inv)
    if args.watch:

        def gather() -> list[ModelStatus]:
            return _gather(args, inv, hosts, plan)

        if args.json or not ui.out.is_terminal:
            statuses = watch(gather, _show_round(args, ui, None), args.every)
        else:
            with Live(status_screen([]), console=ui.out, auto_refresh=False) as live:
                statuses = watch(gather, _show_round(args, ui, live), args.every)
    else:
        statuses = _gather(args, inv, hosts, plan)
        if args.json:
            ui.json(status_json(statuses))
        else:
            ui.table(status_table(statuses))
            for line in findings(statuses):
                ui.info(line)
    return EXIT_OK if statuses and all(s.ok for s in statuses) else EXIT_FAILURE
