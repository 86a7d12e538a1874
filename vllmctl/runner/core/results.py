"""What a run produced per host and step, with the Ansible-style recap counts and a JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from vllmctl.ops import Step

HostStatus = Literal["ok", "failed", "unreachable", "skipped"]
StepStatus = Literal["ok", "changed", "failed", "planned"]


@dataclass
class StepResult:
    phase: str
    step: Step
    status: StepStatus
    error: str = ""
    stderr_tail: str = ""
    diff: str = ""
    note: str = ""  # what a step that passed did beyond its commands (a reboot for stuck processes)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "op": self.step.op,
            "target": self.step.target,
            "status": self.status,
            "commands": self.step.rendered(),
            "noop": self.step.noop,
            "error": self.error or None,
            "stderr_tail": self.stderr_tail or None,
            "diff": self.diff or None,
            "warnings": list(self.step.warnings) or None,
            **({"note": self.note} if self.note else {}),
        }


@dataclass
class HostResult:
    host: str
    status: HostStatus = "ok"
    steps: list[StepResult] = field(default_factory=list)
    error: str = ""
    hint: str = ""
    elapsed_s: float = 0.0
    release: dict[str, Any] = field(default_factory=dict)  # the release gate's outcome, when it ran
    gateway: list[dict[str, Any]] = field(default_factory=list)  # drained / ready in the gateway, in order
    rollout: list[dict[str, Any]] = field(default_factory=list)  # taken out / held back / put back
    broke_lock: str = ""  # the owner of a stale lock (its run died on this controller) this run broke

    def count(self, status: StepStatus) -> int:
        return sum(1 for step in self.steps if step.status == status)

    @property
    def changed(self) -> int:
        return self.count("changed") + self.count("planned")

    def recap(self) -> dict[str, int]:
        return {
            "ok": self.count("ok"),
            "changed": self.changed,
            "failed": int(self.status == "failed"),
            "unreachable": int(self.status == "unreachable"),
            "skipped": int(self.status == "skipped"),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "recap": self.recap(),
            "error": self.error or None,
            "hint": self.hint or None,
            "elapsed_s": round(self.elapsed_s, 3),
            "release": self.release or None,
            "gateway": self.gateway or None,
            "rollout": self.rollout or None,
            "broke_lock": self.broke_lock or None,
            "steps": [step.to_json() for step in self.steps],
        }


@dataclass
class RunResult:
    playbook: str
    check: bool
    hosts: dict[str, HostResult]
    aborted: str = ""

    @property
    def failed(self) -> bool:
        """Also a host left as it was (skipped): the fleet did not converge."""
        statuses = ("failed", "unreachable", "skipped")
        return any(h.status in statuses for h in self.hosts.values()) or bool(self.aborted)

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "check": self.check,
            "aborted": self.aborted or None,
            "hosts": {name: result.to_json() for name, result in self.hosts.items()},
        }
