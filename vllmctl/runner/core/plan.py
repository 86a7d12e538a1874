"""Planning, pure: a playbook's tasks expanded for one host, the facts they need, and the Steps from facts."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from vllmctl.ops import OPERATIONS, Step
from vllmctl.tasks import expand
from vllmctl.tasks.desired import HostContext, OpCall
from vllmctl.tasks.playbooks import Phase, Playbook

FactRequests = dict[str, tuple[str, ...]]


def phase_calls(phase: Phase, ctx: HostContext) -> list[OpCall]:
    return [call for task in phase.tasks for call in expand(task.task, task.params, ctx)]


def merge_requests(calls: Iterable[OpCall]) -> FactRequests:
    """Union of every call's fact needs, in first-seen order, so one script gathers them all."""
    merged: dict[str, dict[str, None]] = {}
    for call in calls:
        for name, args in OPERATIONS[call.op].requests(call.args).items():
            merged.setdefault(name, {}).update(dict.fromkeys(args))
    return {name: tuple(args) for name, args in merged.items()}


def playbook_requests(playbook: Playbook, ctx: HostContext, extra: Iterable[str] = ()) -> FactRequests:
    calls = [call for phase in playbook.phases for call in phase_calls(phase, ctx)]
    requests = merge_requests(calls)
    for name in extra:
        requests.setdefault(name, ())
    return requests


def plan_calls(calls: Iterable[OpCall], facts: Mapping[str, Any]) -> list[Step]:
    return [OPERATIONS[call.op](call.args, facts) for call in calls]


def plan_phase(phase: Phase, ctx: HostContext, facts: Mapping[str, Any]) -> list[Step]:
    return plan_calls(phase_calls(phase, ctx), facts)


def unified_diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"{path} (host)", f"{path} (desired)"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
