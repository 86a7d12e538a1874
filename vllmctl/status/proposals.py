"""Engine-arg changes from live status, pure: each engine process's measured figures and advice in, one
proposed change per model out (the tuning guides' rules live in advice.py), with its evidence, as a unified
diff of the model's `engine_args` and as the changed inventory text that `vllmctl apply` takes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from vllmctl.status.advice import Advice
from vllmctl.status.model import ModelStatus

# The advice that decides a model's change when its processes disagree: a process short of memory outranks
# one with headroom, since a bigger batch on the short one would preempt more.
PRIORITY = (
    "frequent-preemption",
    "kv-cache-full",
    "max-num-seqs-too-low",
    "prefill-budget-too-low",
    "scheduler-too-conservative",
    "load-bound",
)
# Changes that shrink a setting; the others grow one. Between processes the smallest step is taken, so
# one change never overshoots what any process asked for.
SHRINKING = frozenset(
    {("frequent-preemption", "max_num_seqs"), ("scheduler-too-conservative", "schedule_conservativeness")}
)


@dataclass(frozen=True)
class Finding:
    """One engine process's advice with the figures it was measured from."""

    where: str  # host/model:port
    advice: Advice
    evidence: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where, **self.advice.to_json(), "evidence": self.evidence}


@dataclass(frozen=True)
class Proposal:
    model: str
    current: dict[str, Any]  # the inventory's engine_args
    changes: dict[str, Any]  # empty: keep the inventory as it is
    reason: str
    findings: tuple[Finding, ...] = ()
    unmeasured: tuple[str, ...] = ()  # processes with no metrics: where, and why

    @property
    def proposed(self) -> dict[str, Any]:
        return {**self.current, **self.changes}

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "current": self.current,
            "changes": self.changes,
            "proposed": self.proposed,
            "reason": self.reason,
            "findings": [f.to_json() for f in self.findings],
            "unmeasured": list(self.unmeasured),
        }


def _where(status: ModelStatus) -> str:
    return f"{status.host}/{status.model}:{status.port}"


def measured_evidence(status: ModelStatus, advice: Advice) -> dict[str, float]:
    """The advice's own evidence plus the measured KV size and what one running sequence holds of it."""
    evidence = dict(advice.evidence)
    tokens, metrics = status.kv_tokens, status.metrics
    if tokens is not None:
        evidence["kv_tokens"] = float(tokens)
        if metrics is not None and metrics.kv_usage is not None and metrics.requests_running:
            per_seq = metrics.kv_usage * tokens / metrics.requests_running
            evidence["kv_tokens_per_running_seq"] = round(per_seq, 1)
    return evidence


def _step(value: Any, current: Any) -> float:
    return abs(float(value) - float(current))


def _smallest_step(code: str, flag: str, values: list[Any], current: Any) -> Any:
    if isinstance(current, int | float) and not isinstance(current, bool):
        return min(values, key=lambda value: _step(value, current))
    return max(values) if (code, flag) in SHRINKING else min(values)


def merge_changes(
    code: str, suggestions: Sequence[Mapping[str, Any]], current: Mapping[str, Any]
) -> dict[str, Any]:
    """Per flag, the suggestion closest to the current value (or, unset, the smallest step that way)."""
    flags = sorted({flag for suggested in suggestions for flag in suggested})
    merged = {
        flag: _smallest_step(code, flag, [s[flag] for s in suggestions if flag in s], current.get(flag))
        for flag in flags
    }
    return {flag: value for flag, value in merged.items() if current.get(flag) != value}


def propose(model: str, current: Mapping[str, Any], statuses: Sequence[ModelStatus]) -> Proposal:
    """One model's change from all its processes' status (other models' statuses are ignored)."""
    mine = [s for s in statuses if s.model == model]
    unmeasured = tuple(f"{_where(s)}: {s.error or 'no metrics'}" for s in mine if s.metrics is None)
    findings = tuple(
        Finding(_where(s), advice, measured_evidence(s, advice))
        for s in sorted(mine, key=lambda s: (s.host, s.port))
        if s.metrics is not None
        for advice in s.advice
    )
    args = dict(current)
    if not any(s.metrics is not None for s in mine):
        return Proposal(
            model, args, {}, "no process answered with metrics: nothing to decide from", (), unmeasured
        )
    if not findings:
        return Proposal(
            model,
            args,
            {},
            "no advice: no preemption, no queue with free KV cache, no full KV cache",
            (),
            unmeasured,
        )
    ranked = sorted(
        findings, key=lambda f: PRIORITY.index(f.advice.code) if f.advice.code in PRIORITY else len(PRIORITY)
    )
    code = ranked[0].advice.code
    deciding = [f for f in findings if f.advice.code == code]
    changes = merge_changes(code, [f.advice.suggested_args for f in deciding], args)
    where = ", ".join(f.where for f in deciding)
    if changes:
        reason = f"{code} on {where}: {deciding[0].advice.message}"
    else:
        reason = f"{code} on {where}: {deciding[0].advice.message} (no engine_args change)"
    return Proposal(model, args, changes, reason, findings, unmeasured)


def propose_all(models: Mapping[str, Mapping[str, Any]], statuses: Sequence[ModelStatus]) -> list[Proposal]:
    """`models`: model name -> its inventory engine_args, for the models that were looked at."""
    return [propose(name, args, statuses) for name, args in sorted(models.items())]


def _dump(args: Mapping[str, Any]) -> list[str]:
    text = yaml.safe_dump({"engine_args": dict(args)}, sort_keys=True, default_flow_style=False)
    return text.splitlines(keepends=True)


def engine_args_diff(proposal: Proposal, inventory_name: str) -> str:
    """Unified diff of the model's engine_args; empty when nothing changes."""
    if not proposal.changes:
        return ""
    label = f"{inventory_name}:models.{proposal.model}.engine_args"
    lines = difflib.unified_diff(
        _dump(proposal.current), _dump(proposal.proposed), f"a/{label}", f"b/{label}"
    )
    return "".join(lines)


def changed_inventory(text: str, proposals: Sequence[Proposal]) -> str:
    """The inventory with each proposal's engine_args; YAML comments and anchors are not kept."""
    doc = yaml.safe_load(text)
    for proposal in proposals:
        if proposal.changes:
            doc["models"][proposal.model]["engine_args"] = proposal.proposed
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
