"""The status view, pure: per-(host, model, replica) results gathered by the `status` command turned into
display rows, a rich Table and JSON; flags a measured KV cache that strays from the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from vllmctl.facts.lock import HeldLock, held_locks
from vllmctl.status.metrics import EngineMetrics, Rates
from vllmctl.status.model import KV_DEVIATION_MAX, ModelStatus

# The planner's KV figure is checked against what the engine reported at startup. Within 5 % is the
# accuracy the planner aims for; beyond it the plan's concurrency promises do not hold.
MISSING = "-"
HEADERS = {
    "host": "HOST",
    "model": "MODEL",
    "port": "PORT",
    "service": "SERVICE",
    "release": "RELEASE",
    "health": "HEALTH",
    "running": "RUNNING",
    "waiting": "WAITING",
    "kv_used": "KV USED",
    "preempted": "PREEMPTED (/S)",
    "tokens_per_s": "TOK/S IN/OUT",
    "prefix_hits": "PREFIX HIT (NOW)",
    "kv_tokens": "KV TOKENS",
    "advice": "ADVICE",
}
COLUMNS = tuple(HEADERS)


def _number(value: float | None, digits: int = 0) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def _health(status: ModelStatus) -> str:
    if status.error:
        return "unreachable"
    return {True: "ok", False: "failing", None: MISSING}[status.healthy]


def _service(status: ModelStatus) -> str:
    """The engine unit's state; for a multi-node model also its Ray units and whether the cluster formed."""
    state = status.service_state
    if status.left_over:
        state += f", old engine still running after stop ({status.left_over} processes)"
    return f"{state}, {status.group.summary()}" if status.group else state


def _kv_cell(status: ModelStatus) -> str:
    measured, planned, deviation = status.kv_tokens, status.planned_kv_tokens, status.kv_deviation
    if measured is None:
        return f"plan {planned:,}" if planned else MISSING
    if deviation is None:
        return f"{measured:,}"
    flag = " !" if status.kv_off_plan else ""
    return f"{measured:,} ({deviation:+.1%} vs plan){flag}"


def _preempted(m: EngineMetrics | None, r: Rates | None) -> str:
    """Preemptions since the engine started, and their rate over this status's scrapes."""
    if m is None or m.preemptions_total is None:
        return MISSING
    rate = MISSING if r is None or r.preemptions_per_s is None else f"{r.preemptions_per_s:.2f}/s"
    return f"{m.preemptions_total:,.0f} ({rate})"


def _throughput(r: Rates | None) -> str:
    """Prompt tokens in / generated tokens out per second over this status's scrapes."""
    if r is None:
        return MISSING
    return f"{_number(r.prompt_tokens_per_s, 1)}/{_number(r.generation_tokens_per_s, 1)}"


def _prefix_hits(m: EngineMetrics | None, r: Rates | None) -> str:
    """Prefix-cache hit rate since the engine started, and over this status's scrapes."""
    lifetime = m.prefix_cache_hit_rate if m else None
    if lifetime is None:
        return MISSING
    now = MISSING if r is None or r.prefix_cache_hit_rate is None else f"{r.prefix_cache_hit_rate:.0%}"
    return f"{lifetime:.0%} ({now})"


def status_row(status: ModelStatus) -> dict[str, str]:
    """One row of display text, keyed by COLUMNS."""
    m, r = status.metrics, status.rates
    return {
        "host": f"{status.host} (group {status.group.group})" if status.group else status.host,
        "model": f"{status.model} +{','.join(status.adapters)}" if status.adapters else status.model,
        "port": str(status.port),
        "service": _service(status),
        "release": status.release or MISSING,
        "health": _health(status),
        "running": _number(m.requests_running if m else None),
        "waiting": _number(m.requests_waiting if m else None),
        "kv_used": MISSING if m is None or m.kv_usage is None else f"{m.kv_usage:.0%}",
        "preempted": _preempted(m, r),
        "tokens_per_s": _throughput(r),
        "prefix_hits": _prefix_hits(m, r),
        "kv_tokens": _kv_cell(status),
        "advice": ", ".join(a.code for a in status.advice) or MISSING,
    }


def status_rows(statuses: Sequence[ModelStatus]) -> list[dict[str, str]]:
    ordered = sorted(statuses, key=lambda s: (s.host, s.model, s.port))
    return [status_row(status) for status in ordered]


def status_table(statuses: Sequence[ModelStatus]) -> Table:
    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for column in COLUMNS:
        table.add_column(HEADERS[column], no_wrap=column in ("host", "model", "port"))
    ordered = sorted(statuses, key=lambda s: (s.host, s.model, s.port))
    for status, row in zip(ordered, status_rows(ordered), strict=True):
        style = None if status.ok and not status.kv_off_plan else "yellow" if status.ok else "red"
        table.add_row(*(row[column] for column in COLUMNS), style=style)
    return table


def findings(statuses: Sequence[ModelStatus]) -> list[str]:
    """Plain sentences for what needs attention: errors, KV off plan, and each advice with its evidence."""
    lines: list[str] = []
    for s in sorted(statuses, key=lambda s: (s.host, s.model, s.port)):
        where = f"{s.host}/{s.model}:{s.port}"
        if s.error:
            lines.append(f"{where}: {s.error}")
        if s.kv_off_plan and s.kv_deviation is not None:
            lines.append(
                f"{where}: KV cache {s.kv_tokens:,} tokens is {s.kv_deviation:+.1%} off the planned "
                f"{s.planned_kv_tokens:,} (more than {KV_DEVIATION_MAX:.0%})"
            )
        for advice in s.advice:
            evidence = ", ".join(f"{k}={v:g}" for k, v in advice.evidence.items())
            change = ", ".join(f"{k}={v}" for k, v in advice.suggested_args.items()) or "no change"
            lines.append(f"{where}: {advice.message} [{evidence}] -> {change}")
        lines.extend(f"{where}: {note}" for note in s.notes)
        if s.group is not None:
            lines.extend(f"{where}: group {s.group.group}: {problem}" for problem in s.group.problems())
    return lines


def status_locks(statuses: Sequence[ModelStatus], now: datetime | None) -> list[HeldLock]:
    """Each host's held lock once, by host name; without `now` their ages are unknown."""
    by_host = {s.host: s.lock for s in sorted(statuses, key=lambda s: s.host)}
    return held_locks(by_host, now)


def lock_lines(statuses: Sequence[ModelStatus], now: datetime | None) -> list[str]:
    return [lock.sentence() for lock in status_locks(statuses, now)]


def gate_lines(gpu_gate: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A line per host whose GPU gate refuses or could not be judged; passed and not-gated hosts stay quiet
    (every verdict is in `--json`), so a healthy fleet's status is its table."""
    return [
        f"{host}: GPU gate {gate['status']}: {gate['reason']}"
        for host, gate in sorted(gpu_gate.items())
        if gate["status"] in ("refused", "unknown")
    ]


def status_screen(statuses: Sequence[ModelStatus], title: str = "", now: datetime | None = None) -> Group:
    """What `status --watch` redraws each round: a title line, the table, the held locks, the findings."""
    parts: list[Table | Text] = [Text(title)] if title else []
    parts.append(status_table(statuses))
    parts.extend(Text(line) for line in [*lock_lines(statuses, now), *findings(statuses)])
    return Group(*parts)


def _metrics_json(m: EngineMetrics | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "engine": m.engine,
        "requests_running": m.requests_running,
        "requests_waiting": m.requests_waiting,
        "kv_usage": m.kv_usage,
        "preemptions_total": m.preemptions_total,
        "prompt_tokens_total": m.prompt_tokens_total,
        "generation_tokens_total": m.generation_tokens_total,
        "requests_succeeded_total": m.requests_succeeded_total,
        "kv_capacity_tokens": m.kv_capacity_tokens,
        "ttft_mean_s": m.ttft.mean if m.ttft else None,
        "itl_mean_s": m.itl.mean if m.itl else None,
        "prefix_cache_queries_total": m.prefix_cache_queries_total,
        "prefix_cache_hits_total": m.prefix_cache_hits_total,
    }


def _rates_json(r: Rates | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "dt_s": r.dt_s,
        "preemptions_per_s": r.preemptions_per_s,
        "prompt_tokens_per_s": r.prompt_tokens_per_s,
        "generation_tokens_per_s": r.generation_tokens_per_s,
        "requests_per_s": r.requests_per_s,
        "prefix_cache_hit_rate": r.prefix_cache_hit_rate,
    }


def _prefix_json(s: ModelStatus) -> dict[str, float | None]:
    """Both hit rates side by side: over the scrape interval (null without prompts in it) and lifetime."""
    return {
        "interval": s.rates.prefix_cache_hit_rate if s.rates else None,
        "lifetime": s.metrics.prefix_cache_hit_rate if s.metrics else None,
    }


def status_json(statuses: Sequence[ModelStatus], now: datetime | None = None) -> dict[str, Any]:
    """Raw numbers for machines: one entry per engine process, an overall ok, and each held host lock."""
    entries = [
        {
            "host": s.host,
            "model": s.model,
            "port": s.port,
            "service_state": s.service_state,
            "left_over_processes": s.left_over,
            "release": s.release,
            "healthy": s.healthy,
            "ok": s.ok,
            "error": s.error or None,
            "http": s.http,
            "metrics": _metrics_json(s.metrics),
            "rates": _rates_json(s.rates),
            "prefix_cache_hit_rate": _prefix_json(s),
            "advice": [a.to_json() for a in s.advice],
            "kv": {
                "planned_tokens": s.planned_kv_tokens,
                "measured_tokens": s.kv_tokens,
                "deviation": s.kv_deviation,
                "off_plan": s.kv_off_plan,
            },
            "notes": list(s.notes),
            "adapters": list(s.adapters) if s.adapters is not None else None,
            "group": {**s.group.to_json(), "problems": s.group.problems()} if s.group else None,
        }
        for s in sorted(statuses, key=lambda s: (s.host, s.model, s.port))
    ]
    locks = {lock.host: lock.to_json() for lock in status_locks(statuses, now)}
    return {"ok": all(entry["ok"] for entry in entries), "entries": entries, "locks": locks}


def gateway_table(view: dict[str, dict[str, Any]]) -> Table:
    """The gateway's view: per gateway host and model, each server's state and the requests on it."""
    table = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for header in ("gateway", "model", "server", "state", "sessions", "queued", "check"):
        table.add_column(header, no_wrap=True)
    for gateway, found in view.items():
        if "error" in found:
            table.add_row(gateway, "-", "-", f"unreachable: {found['error']}", "", "", "", style="red")
            continue
        for ref, stat in found["servers"].items():
            model, _, server = ref.partition("/")
            style = None if str(stat["status"]).startswith("UP") else "yellow"
            row = (str(stat["sessions"]), str(stat["queued"]), str(stat["check"]))
            state = str(stat["status"])
            holder = stat.get("holder")
            if holder:  # a drained server: by a live run, or by nobody who will put it back
                state += " (no run holds it)" if holder["orphan"] else " (held by a run)"
            table.add_row(gateway, model, server, state, *row, style=style)
    return table


def drain_lines(view: dict[str, dict[str, Any]]) -> list[str]:
    """One line per drained server: who holds it out, or that no run does (runner/gateway/out_records.py)."""
    return [
        f"gateway {gateway}: {ref} is {stat['status']}: {stat['holder']['said']}"
        for gateway, found in view.items()
        for ref, stat in found.get("servers", {}).items()
        if "holder" in stat
    ]
