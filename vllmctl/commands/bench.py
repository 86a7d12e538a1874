"""`vllmctl bench`: the smoke benchmark of each (host, model, replica) endpoint, or of one `--url`.

Prints a table per endpoint (or `--json`) and SLO violations; exits 1 if an endpoint fails or breaks its SLO.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from typing import Any

from rich.table import Table

from vllmctl.bench.endpoints import Endpoint, endpoints_for, gateway_endpoints
from vllmctl.bench.prompts import load_tokenizer
from vllmctl.bench.report import EndpointReport, LoadSpec, check_report
from vllmctl.bench.smoke import benchmark_endpoint
from vllmctl.bench.stats import SLO_KEYS, LevelSummary, Violation
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, InputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Host, Inventory
from vllmctl.transport.tunnel import base_url, route_of, tunnel_overhead_ms


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("bench", help="smoke-benchmark the fleet's endpoints (TTFT, ITL, throughput)")
    parser.add_argument("inventory", nargs="?", help="inventory file; or give --url and --model-id")
    parser.add_argument("--url", help="one OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model-id", help="served model name at --url")
    parser.add_argument(
        "--api-key-env", metavar="VAR", help="with --url: environment variable holding the endpoint's API key"
    )
    parser.add_argument("--model", help="comma list of inventory model names (default: all)")
    parser.add_argument(
        "--gateway", action="store_true", help="benchmark each model through the inventory's gateway"
    )
    options.add_limit(parser)
    parser.add_argument("--concurrency", default="1,4,16", help="comma list of levels (default 1,4,16)")
    parser.add_argument("--requests", type=int, help="requests per level (default 4 per slot, at least 8)")
    parser.add_argument("--input-tokens", type=int, default=128, help="prompt length (default 128)")
    parser.add_argument("--output-tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--level-timeout", type=float, default=120.0, help="seconds per level (default 120)")
    parser.add_argument("--tokenizer", help="tokenizer.json or model directory, for exact prompt lengths")
    parser.add_argument(
        "--slo", action="append", default=[], metavar="KEY=VALUE", help="extra SLO, e.g. ttft_p99_ms=500"
    )
    options.add_json(parser)
    parser.set_defaults(func=run)


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise InputError(f"--concurrency {text!r} is not a comma list of positive integers", "e.g. 1,4,16")
    return levels


def parse_slo(pairs: list[str]) -> dict[str, float]:
    slo: dict[str, float] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if key not in SLO_KEYS or number is None:
            raise InputError(f"--slo {pair!r}: expected KEY=NUMBER", f"keys: {', '.join(SLO_KEYS)}")
        slo[key] = number
    return slo


def _spec(args: argparse.Namespace) -> LoadSpec:
    for flag in ("requests", "input_tokens", "output_tokens"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise InputError(f"--{flag.replace('_', '-')} must be at least 1", "give a positive integer")
    return LoadSpec(
        concurrency=parse_levels(args.concurrency),
        output_tokens=args.output_tokens,
        requests=args.requests,
        level_timeout_s=args.level_timeout,
    )


def _replica_counts(inv: Inventory) -> dict[tuple[str, str], int]:
    """Data-parallel replicas per (host, model) as the offline planner sees them; 1 where it cannot plan."""
    from vllmctl.runner.fleet.hosts import served_plan

    return served_plan(inv).replica_counts()


Targets = tuple[list[Endpoint], dict[str, dict[str, float]], dict[str, str]]


def _targets(args: argparse.Namespace) -> Targets:
    """Endpoints, SLOs per model, and API keys per model (an inventory's `api_key: {secret}`, read here)."""
    if args.url:
        if args.inventory or not args.model_id:
            raise InputError(
                "--url needs --model-id and no inventory", "e.g. --url http://h:8000 --model-id m"
            )
        keys = {}
        if args.api_key_env:
            if args.api_key_env not in os.environ:
                raise InputError(
                    f"--api-key-env: {args.api_key_env} is not set", f"export {args.api_key_env}"
                )
            keys[args.model_id] = os.environ[args.api_key_env]
        return [Endpoint("", args.model_id, 0, args.url)], {}, keys
    if not args.inventory:
        raise InputError("give an inventory, or --url with --model-id", "e.g. vllmctl bench fleet.yml")
    from vllmctl.runner.fleet.hosts import api_keys, select_hosts

    inv = load_inventory(args.inventory)
    models = [name.strip() for name in (args.model or "").split(",") if name.strip()]
    if args.gateway:
        found = gateway_endpoints(inv, models, base_url)
    else:
        found = endpoints_for(inv, select_hosts(inv, args.limit), models, _replica_counts(inv), base_url)
    if not found:
        raise InputError("no endpoint matches --model and --limit", "see `vllmctl plan` for what runs where")
    found = [_routed(e, inv.hosts[e.host]) for e in found]
    slos = {name: dict(model.slo) for name, model in inv.models.items()}
    return found, slos, api_keys(inv, os.environ)


def _routed(endpoint: Endpoint, host: Host) -> Endpoint:
    """The endpoint with its route, and what a tunnel adds to each request where it is tunnelled."""
    if route_of(host) == "direct":
        return replace(endpoint, http="direct")
    return replace(endpoint, http="tunnel", tunnel_overhead_ms=tunnel_overhead_ms(host, endpoint.port))


def run(args: argparse.Namespace, ui: Ui) -> int:
    spec = _spec(args)
    extra_slo = parse_slo(args.slo)
    endpoints, slos, keys = _targets(args)
    shared_tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    results: list[dict[str, Any]] = []
    failed = False
    for endpoint in endpoints:
        local = endpoint.local_tokenizer()
        tokenizer = shared_tokenizer or (load_tokenizer(local) if local else None)
        via = ""
        if endpoint.http == "tunnel":
            added = endpoint.tunnel_overhead_ms
            cost = "not measured" if added is None else f"measured +{added:.2f} ms per request"
            via = f" (an SSH port forward, {cost}: latencies include it)"
        ui.info(f"{endpoint.label}: benchmarking {endpoint.base_url}{via} at concurrency {args.concurrency}")

        def progress(level: LevelSummary, endpoint: Endpoint = endpoint) -> None:
            ui.info(_level_line(endpoint, level))

        report = benchmark_endpoint(
            endpoint.base_url,
            endpoint.model,
            spec,
            args.input_tokens,
            tokenizer,
            on_level=progress,
            api_key=keys.get(endpoint.model),
        )
        violations = check_report(report, {**slos.get(endpoint.model, {}), **extra_slo})
        failed = failed or bool(report.error or violations)
        results.append(_json(endpoint, report, violations, tokenizer is not None))
        if not args.json:
            _show(ui, endpoint, report, violations)
    if args.json:
        ui.json({"ok": not failed, "endpoints": results})
    return EXIT_FAILURE if failed else EXIT_OK


def _level_line(endpoint: Endpoint, level: LevelSummary) -> str:
    return (
        f"{endpoint.label}: concurrency {level.concurrency}: {level.completed}/{level.requests} ok, "
        f"{level.output_throughput:.1f} output tok/s, TTFT p50 {level.ttft.p50_ms:.1f} ms"
    )


def _json(
    endpoint: Endpoint, report: EndpointReport, violations: list[Violation], exact: bool
) -> dict[str, Any]:
    return {
        "host": endpoint.host,
        "model": endpoint.model,
        "replica": endpoint.replica,
        "http": endpoint.http,
        "tunnel_overhead_ms": endpoint.tunnel_overhead_ms,
        "prompts": "tokenizer" if exact else "word-list",
        **report.to_json(),
        "violations": [{**vars(v), "message": v.message} for v in violations],
    }


def _ms(p50: float, p99: float) -> str:
    return f"{p50:.1f} / {p99:.1f}"


def _show(ui: Ui, endpoint: Endpoint, report: EndpointReport, violations: list[Violation]) -> None:
    if report.error:
        ui.error(f"{endpoint.label} ({endpoint.base_url}): {report.error}")
        return
    table = Table(title=f"{endpoint.label}  {endpoint.base_url}")
    for column in ("conc", "ok/sent", "req/s", "out tok/s", "TTFT ms p50/p99", "ITL ms p50/p99"):
        table.add_column(column, justify="right")
    for column in ("TPOT ms p50/p99", "E2E ms p50/p99", "in tok"):
        table.add_column(column, justify="right")
    for level in report.levels:
        mean_input = level.total_input_tokens / level.completed if level.completed else 0.0
        table.add_row(
            str(level.concurrency),
            f"{level.completed}/{level.requests}",
            f"{level.request_throughput:.2f}",
            f"{level.output_throughput:.1f}",
            _ms(level.ttft.p50_ms, level.ttft.p99_ms),
            _ms(level.itl.p50_ms, level.itl.p99_ms),
            _ms(level.tpot.p50_ms, level.tpot.p99_ms),
            _ms(level.e2e.p50_ms, level.e2e.p99_ms),
            f"{mean_input:.0f}",
        )
    ui.table(table)
    for level in report.levels:
        for message in level.errors:
            ui.warn(f"{endpoint.label}: concurrency {level.concurrency}: {message}")
    for violation in violations:
        ui.error(f"{endpoint.label}: SLO broken: {violation.message}")
