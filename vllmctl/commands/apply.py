"""`vllmctl apply INVENTORY`: converge hosts to a playbook (site.yml by default); --check shows the plan."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from vllmctl.bench.readiness import FLOOR_S
from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_CHANGES, EXIT_FAILURE, EXIT_OK
from vllmctl.runner.apply import ApplyRequest, apply
from vllmctl.runner.core.view import show_failures, show_plan, show_recap

if TYPE_CHECKING:
    from vllmctl.runner.multinode.apply_groups import GroupRun


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("apply", help="converge the fleet to a playbook (site.yml by default)")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument(
        "--playbook", default="site", help="a shipped playbook name or a file (default: site)"
    )
    options.add_limit(parser)
    parser.add_argument("--check", action="store_true", help="show what would change; change nothing")
    parser.add_argument("--diff", action="store_true", help="show unified diffs of changed files")
    options.add_forks(parser)
    parser.add_argument("--batch-size", type=int, help="hosts per batch (overrides the playbook's serial)")
    parser.add_argument(
        "--max-fail-percentage", type=float, help="skip later batches once a batch fails past this rate"
    )
    options.add_rollout(parser)
    options.add_max_unavailable(parser)
    options.add_timeout(parser, changes_hosts=True)
    parser.add_argument("--host-timeout", type=float, default=3600.0, help="seconds per host for the run")
    parser.add_argument(
        "--no-gate",
        action="store_true",
        help="skip releases and the health/smoke-benchmark gate (no rollback)",
    )
    parser.add_argument(
        "--keep-releases", type=int, help="releases kept per host (default: the inventory's releases.keep)"
    )
    parser.add_argument(
        "--health-timeout",
        type=float,
        help="seconds an engine may take to answer health after its start "
        f"(default: {FLOOR_S:g} s, plus 15 s per GiB of weights on a single host)",
    )
    parser.add_argument("--break-lock", action="store_true", help="clear a lock left by a dead apply")
    parser.add_argument(
        "--fresh-facts",
        action="store_true",
        help="read every fact under sudo; do not reuse facts a no-op run kept (docs/executor.md)",
    )
    options.add_yes(parser, "do not ask for confirmation on a terminal (never asked otherwise)")
    parser.add_argument(
        "--offline", action="store_true", help="never fetch model configs from the hub for planning"
    )
    options.add_json(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="also list steps that were no-ops")
    parser.set_defaults(func=run)


def request_from(args: argparse.Namespace) -> ApplyRequest:
    return ApplyRequest(
        inventory=args.inventory,
        playbook=args.playbook,
        limit=args.limit,
        check=args.check,
        diff=args.diff,
        forks=args.forks,
        batch_size=args.batch_size,
        max_fail_percentage=args.max_fail_percentage,
        max_fail=args.max_fail,
        wait_available=args.wait_available,
        max_unavailable=args.max_unavailable,
        timeout=args.timeout,
        host_timeout=args.host_timeout,
        no_gate=args.no_gate,
        keep_releases=args.keep_releases,
        health_timeout=args.health_timeout,
        break_lock=args.break_lock,
        offline=args.offline,
        fresh_facts=args.fresh_facts,
    )


def run(args: argparse.Namespace, ui: Ui) -> int:
    def confirm(hosts: int, playbook: str) -> bool:
        if args.yes or not sys.stdin.isatty():
            return True
        answer = input(f"converge {hosts} host(s) with playbook {playbook!r}? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    outcome = apply(request_from(args), ui, confirm)
    if args.json:
        ui.json(outcome.to_json())
    else:
        show_plan(ui, outcome.result, args.verbose)
        for line in wave_lines(outcome.waves):
            ui.info(line)
    show_failures(ui, outcome.result)
    if outcome.gateway_gate is not None and not outcome.gateway_gate["passed"]:
        reasons = "\n  ".join(outcome.gateway_gate["reasons"])
        ui.error(f"the gateway's gate failed (every host passed its own):\n  {reasons}")
    show_recap(ui, outcome.result)
    show_groups(
        ui, outcome.groups, diffs=not args.json
    )  # JSON carries them already; stdout stays one document
    if outcome.failed:
        return EXIT_FAILURE
    return EXIT_CHANGES if args.check and outcome.changed else EXIT_OK


def wave_lines(rollout: dict[str, Any]) -> list[str]:
    """The rollout's waves, planned (--check) or as they ran, then the hosts no wave could take."""
    said = []
    for number, wave in enumerate(rollout.get("waves", []), 1):
        canary = wave.get("canary")
        kind = " (canary, alone)" if canary is True else f" (canary of {', '.join(canary)})" if canary else ""
        took = f" in {wave['end'] - wave['start']:.0f} s" if wave.get("end") is not None else ""
        said.append(f"rollout wave {number}{kind}: {', '.join(wave['hosts'])}{took}")
    for soak in rollout.get("soaks", []):
        sides = (f"{side} {soak_side(s)}" for side in ("canary", "peers") if (s := soak.get(side)))
        why = f" ({soak['reason']})" if soak["reason"] else ""
        said.append(f"canary soak of {soak['model']}: {'; '.join(sides)}: {soak['verdict']}{why}")
    said.extend(f"rollout held: {host}: {why}" for host, why in rollout.get("held", {}).items())
    return said


def soak_side(s: dict[str, Any]) -> str:
    served = f"{s['requests']} requests, {s['errors']} failed, {s['mean_session_ms']:.0f} ms a session"
    engine = f", first token {s['ttft_ms']:.0f} ms, {s['itl_ms']:.1f} ms a token" if s["first_tokens"] else ""
    return served + engine


def show_groups(ui: Ui, groups: list[GroupRun], diffs: bool) -> None:
    if not groups:
        return
    from vllmctl.runner.multinode.apply_groups import summary  # only runs with multi-node models load it

    for group, line in zip(groups, summary(groups), strict=True):
        if group.failed:
            reasons = "\n".join(f"  {reason}" for reason in group.reasons)
            ui.error(f"{line}\n{reasons}")
        elif group.status in ("would_change", "skipped"):
            ui.warn("\n".join([line, *(f"  {reason}" for reason in group.reasons)]))
            for diff in group.diffs if diffs else ():
                ui.data(diff.rstrip("\n"))
        else:
            ui.info(line)
