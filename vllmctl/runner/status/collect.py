"""Status over the fleet: units and release pointers over SSH, `/health` and `/metrics` straight from each
server over HTTP, scraped twice `interval_s` apart so rates and advice have evidence; `watch` repeats it.
`collect` is also what `plan --from-status` reads."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx

from vllmctl.bench.endpoints import Endpoint, endpoints_for
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.paths import RELEASES_DIR
from vllmctl.planner.inventory_plan import InventoryPlan
from vllmctl.releases.host import MANIFEST, json_or_none
from vllmctl.runner import DEFAULT_FORKS
from vllmctl.runner.core.remote import SshRemote
from vllmctl.runner.fleet.hosts import host_contexts, on_each_host
from vllmctl.runner.multinode.cluster import group_api_hosts, group_states
from vllmctl.status.build import Scrape, build_statuses
from vllmctl.status.group import group_models, with_groups
from vllmctl.status.metrics import parse_metrics
from vllmctl.status.model import ModelStatus
from vllmctl.tasks.desired import HostContext
from vllmctl.transport.tunnel import base_url, route_of

HTTP_TIMEOUT_S = 5.0
CURRENT_MANIFEST = f"{RELEASES_DIR}/current/{MANIFEST}"


def served_adapters(client: httpx.Client, endpoint: Endpoint) -> tuple[str, ...] | None:
    """The LoRA adapters a replica's /v1/models lists (the entries with a parent model); None: no answer."""
    try:
        listed = client.get(f"{endpoint.base_url}/v1/models").raise_for_status().json()
        return tuple(sorted(str(m["id"]) for m in listed["data"] if m.get("parent")))
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def scrape(client: httpx.Client, endpoint: Endpoint, adapters: bool = False) -> Scrape:
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
    return Scrape(healthy, metrics, adapters=served_adapters(client, endpoint) if adapters else None)


def gather_hosts(contexts: Mapping[str, HostContext], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Per host {"facts": units, release pointers and the lock, "manifest": the current release's} or
    {"error"}."""

    def one(remote: SshRemote) -> dict[str, Any]:
        facts = remote.gather({"units": (), "releases": (), "lock": ()}, timeout_s)
        return {"facts": facts, "manifest": json_or_none(remote.read_file(CURRENT_MANIFEST, timeout_s))}

    return on_each_host(contexts, one, forks=DEFAULT_FORKS)


def scrape_all(endpoints: Sequence[Endpoint], with_adapters: Collection[str] = ()) -> list[Scrape]:
    """One scrape per endpoint; the models in `with_adapters` also have their /v1/models read."""
    with (
        httpx.Client(timeout=HTTP_TIMEOUT_S) as client,
        ThreadPoolExecutor(max_workers=max(1, min(32, len(endpoints)))) as pool,
    ):
        return list(pool.map(lambda e: scrape(client, e, e.model in with_adapters), endpoints))


def collect(
    inv: Inventory,
    hosts: list[str],
    plan: InventoryPlan,
    models: Sequence[str] = (),
    interval_s: float = 1.0,
    timeout_s: float = 30.0,
    samples: int = 2,
    api_hosts: Mapping[str, Sequence[str]] | None = None,
) -> list[ModelStatus]:
    """Facts over SSH, then `samples` scrapes spread over `interval_s`: one ModelStatus per engine process.

    More samples make "requests wait" and "the batch is full" less a matter of when a scrape lands (a
    gauge read right after requests finished shows a batch that the next step refills).
    """
    endpoints = endpoints_for(inv, hosts, list(models), plan.replica_counts(), base_url, api_hosts)
    facts = gather_hosts(host_contexts(inv, hosts, {}, stage_models=False), timeout_s)
    first = scrape_all(endpoints)
    started = time.monotonic()
    between = []
    for _ in range(max(samples, 2) - 2):
        time.sleep(interval_s / (max(samples, 2) - 1))
        between.append(scrape_all(endpoints))
    time.sleep(interval_s / (max(samples, 2) - 1))
    last = scrape_all(endpoints, [m.name for m in inv.models.values() if m.adapters])
    dt_s = time.monotonic() - started
    statuses = build_statuses(inv, endpoints, facts, plan, first, last, dt_s, between)
    return [replace(s, http=route_of(inv.hosts[s.host])) for s in statuses]


def gather(
    inv: Inventory,
    hosts: list[str],
    plan: InventoryPlan,
    models: Sequence[str] = (),
    interval_s: float = 1.0,
    timeout_s: float = 30.0,
) -> list[ModelStatus]:
    """`collect`, with each multi-node group's state (Ray units, `ray status`) in its API servers' entries
    (the head's, or every used node's in external data parallel)."""
    groups = group_models(inv, hosts, models)
    if not groups:
        return collect(inv, hosts, plan, models, interval_s, timeout_s)
    api = group_api_hosts(inv, groups)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the groups' SSH overlaps the scrapes' interval
        states = pool.submit(group_states, inv, groups, timeout_s)
        statuses = collect(inv, hosts, plan, models, interval_s, timeout_s, api_hosts=api)
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
