"""`vllmctl tune INVENTORY MODEL --slo KEY=N`: try engine settings on one live replica with a fixed request
shape, keep the one with the most goodput under the SLO, and propose it as an inventory diff
(runner/tune/sweep.py); without --yes, only the plan: the replica, the planned settings and the ladders."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from vllmctl.commands import _options as options
from vllmctl.commands.bench import parse_levels, parse_slo
from vllmctl.console import Ui
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK, InputError
from vllmctl.inventory import load_inventory
from vllmctl.runner.tune.sweep import TuneOutcome, TuneRequest, tune
from vllmctl.runner.tune.write import write_scope, write_tuned
from vllmctl.status.proposals import Proposal, engine_args_diff
from vllmctl.tune.search import Trial, knobs_for, winner
from vllmctl.tune.workload import parse_workload


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("tune", help="measure engine settings on one live replica under an SLO")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("model", help="the model to tune")
    parser.add_argument("--slo", action="append", default=[], metavar="KEY=N", help="e.g. ttft_p99_ms=500")
    parser.add_argument("--host", help="the replica's host (default: the model's first host)")
    parser.add_argument("--input-tokens", type=int, default=128, help="prompt length of every request")
    parser.add_argument("--output-tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument(
        "--workload",
        metavar="FILE",
        help='recorded request shapes, JSONL: {"input_tokens": N, "output_tokens": M} per line, in turn',
    )
    parser.add_argument("--concurrency", default="1,2,4,8,16", help="load levels, in requests in flight")
    parser.add_argument("--budget", type=float, default=30.0, help="minutes; no candidate starts after")
    parser.add_argument("--max-trials", type=int, default=8, help="candidates run at most (refused ones: 0)")
    parser.add_argument(
        "--write",
        metavar="PATH",
        help="write the inventory with the winner to PATH (refused unless all the model's hosts have the "
        "measured host's GPUs and engine)",
    )
    parser.add_argument(
        "--health-timeout", type=float, default=600.0, help="seconds a candidate may take to serve"
    )
    options.add_timeout(parser, changes_hosts=True)
    options.add_yes(parser, "run the sweep on the replica")
    options.add_json(parser)
    parser.set_defaults(func=run)


def _request(args: argparse.Namespace) -> TuneRequest:
    inventory = load_inventory(args.inventory)
    if args.model not in inventory.models:
        raise InputError(f"no model named {args.model!r}", f"known: {', '.join(inventory.models)}")
    slo = {**inventory.models[args.model].slo, **parse_slo(args.slo)}
    if not slo:
        raise InputError("tune needs an SLO to measure goodput against", "e.g. --slo ttft_p99_ms=500")
    for flag in ("input_tokens", "output_tokens", "max_trials"):
        if getattr(args, flag) < 1:
            raise InputError(f"--{flag.replace('_', '-')} must be at least 1", "give a positive integer")
    shapes: tuple[tuple[int, int], ...] = ()
    if args.workload:
        try:
            text = Path(args.workload).read_text()
        except OSError as exc:
            raise InputError(
                f"--workload: cannot read {args.workload}: {exc.strerror}", "fix the path"
            ) from exc
        shapes = parse_workload(text, args.workload)
    return TuneRequest(
        args.inventory,
        args.model,
        slo,
        host=args.host,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        shapes=shapes,
        concurrency=parse_levels(args.concurrency),
        budget_s=args.budget * 60,
        max_trials=args.max_trials,
        command_timeout_s=args.timeout,
        health_timeout_s=args.health_timeout,
    )


def run(args: argparse.Namespace, ui: Ui) -> int:
    request = _request(args)
    if args.write:
        write_scope(request)  # refused before the sweep: the model's other hosts would get it unmeasured
    if not args.yes:
        return _plan(request, ui)
    outcome = tune(request, ui.info)
    best = winner(outcome.trials)
    current = outcome.given
    changes = {k: v for k, v in (best.changes if best else {}).items() if current.get(k) != v}
    proposal = Proposal(args.model, current, changes, _reason(outcome, best))
    if args.write:
        write_tuned(args.inventory, args.write, proposal)
    ok = bool(outcome.restored.get("ok"))
    if args.json:
        ui.json(_json(outcome, proposal, args.write))
    else:
        _show(ui, outcome, proposal, Path(args.inventory).name, args.write)
    return EXIT_OK if ok else EXIT_FAILURE


def _plan(request: TuneRequest, ui: Ui) -> int:
    from vllmctl.runner.tune.sweep import Tuner

    with tempfile.TemporaryDirectory() as workdir:
        tuner = Tuner(request, ui.info, Path(workdir))
        planned = tuner.planned()
        ui.info(f"would tune {request.model} on {tuner.host} (drained from the gateway if it has one)")
        ui.info(f"planned: {planned}; SLO: {dict(request.slo)}")
        for knob in knobs_for(planned, int(planned.get("max_model_len") or 2048), tuner.tp_options()):
            ui.info(f"  {knob.flag}: {', '.join(map(str, knob.values))} (planned {knob.planned})")
    ui.info("nothing done: pass --yes to run the sweep")
    return EXIT_CHANGES


def _reason(outcome: TuneOutcome, best: Trial | None) -> str:
    base = next((t for t in outcome.trials if not t.changes and t.ran), None)
    if best is None:
        return "no candidate served within the SLO"
    return f"goodput {best.score:.2f} req/s against {base.score if base else 0:.2f} as planned"


def _row(trial: Trial) -> list[str]:
    detail: dict[str, Any] = trial.detail
    shown = ", ".join(f"{k}={v}" for k, v in trial.changes.items()) or "as planned"
    if trial.refused:
        return [shown, "-", "-", "-", "-", "-", "-", f"refused: {trial.refused}"]

    def ms(key: str) -> str:
        return f"{detail[key]:.0f}" if detail.get(key) is not None else "-"

    kv = detail.get("kv_usage_peak")
    return [
        shown,
        "-" if trial.goodput is None else f"{trial.goodput:.2f}",
        str(detail.get("concurrency", "-")),
        ms("ttft_p99_ms"),
        ms("itl_p99_ms"),
        "-" if kv is None else f"{100 * kv:.0f}%",
        f"{detail.get('preemptions', 0):.0f}",
        str(detail.get("error") or ""),
    ]


def _show(ui: Ui, outcome: TuneOutcome, proposal: Proposal, name: str, written: str | None) -> None:
    table = Table(title=f"tune on {outcome.host}", box=None)
    for column in (
        "candidate",
        "goodput req/s",
        "at conc.",
        "TTFT p99 ms",
        "ITL p99 ms",
        "KV peak",
        "preempt.",
        "note",
    ):
        table.add_column(column)
    for trial in outcome.trials:
        table.add_row(*_row(trial))
    ui.table(table)
    restored = outcome.restored
    state = "serving" if restored.get("ok") else "NOT healthy"
    ui.info(f"{outcome.host}: back on release {restored.get('to')} ({state})")
    ui.info(proposal.reason)
    diff = engine_args_diff(proposal, name)
    ui.data(diff.rstrip("\n") if diff else f"{proposal.model}: keep the planned settings")
    if written:
        ui.info(f"wrote {written}")


def _json(outcome: TuneOutcome, proposal: Proposal, written: str | None) -> dict[str, Any]:
    return {
        "host": outcome.host,
        "planned": outcome.planned,
        "drained": outcome.drained,
        "trials": [
            {"changes": t.changes, "goodput": t.goodput, "refused": t.refused or None, **t.detail}
            for t in outcome.trials
        ],
        "restored": outcome.restored,
        "proposal": proposal.to_json(),
        "written": written,
    }
