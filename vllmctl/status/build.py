"""One ModelStatus per engine process from what was gathered: host facts, the plan, the recorded KV and the
metrics scrapes (pure; the scraping itself is runner/status/collect.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllmctl.bench.endpoints import Endpoint
from vllmctl.facts.state import left_over
from vllmctl.inventory.model import Inventory, runs_on_cpu
from vllmctl.planner.inventory_plan import InventoryPlan
from vllmctl.releases.kv import recorded_kv, recorded_restart_kv
from vllmctl.status.advice import advise
from vllmctl.status.metrics import EngineMetrics, rates
from vllmctl.status.model import ModelStatus
from vllmctl.tasks.desired import unit_name


@dataclass(frozen=True)
class Scrape:
    healthy: bool | None
    metrics: EngineMetrics | None
    error: str = ""
    adapters: tuple[str, ...] | None = None  # LoRA adapters /v1/models lists; None: not asked or no answer


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
                left_over=left_over(unit),
                release=release,
                healthy=latest.healthy,
                metrics=latest.metrics,
                rates=change,
                advice=tuple(advise(engine, engine_args, snapshots, change, on_cpu=on_cpu)),
                planned_kv_tokens=predicted if predicted is not None else _planned_tokens(deployment),
                measured_kv_tokens=measured,
                restart_kv_tokens=recorded_restart_kv(gathered.get("manifest"), endpoint.model),
                error=latest.error if latest.metrics is None else "",
                adapters=last.adapters,
                lock=host_facts.get("lock"),
            )
        )
    return statuses


def _planned_tokens(deployment: Any) -> int | None:
    tokens = getattr(getattr(deployment, "memory", None), "kv_cache_tokens", None)
    return int(tokens) if tokens is not None else None
