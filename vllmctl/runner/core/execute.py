"""Runs a playbook on one host: facts, the lock, steps with their deadlines, the gate hook, the rollout's
leave and return, the audit line. Across hosts (batches, forks): runner/core/playbook_run.py. The clock is
passed in, so the logic tests without SSH."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllmctl.errors import TransportError, VllmctlError
from vllmctl.ops import Command, Step
from vllmctl.ops.reboot import RebootWhenStale, WaitForReboot
from vllmctl.render.quoting import redact_text
from vllmctl.runner import DEFAULT_FORKS
from vllmctl.runner.core.engine_guard import EngineGuard
from vllmctl.runner.core.interrupt import STOP, Interrupted, reason
from vllmctl.runner.core.plan import merge_requests, phase_calls, plan_calls, unified_diff
from vllmctl.runner.core.reboot import REBOOTED
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.core.results import HostResult, StepResult
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Playbook

AfterHost = Callable[[HostContext, Remote, Callable[[], None], str], dict[str, Any]]
AfterHeld = Callable[[HostContext, Remote], str]  # a held-back host: restore what it serves, say what

TAIL = 1500
WAIT_MARGIN_S = 30.0  # a wait ends on its own deadline: this covers its last probe, its report and SSH
GATED_PHASE = "services"  # a failure here (the service did not come up) is rolled back by the gate


@dataclass(frozen=True)
class RunOptions:
    forks: int = DEFAULT_FORKS
    batch_size: int | None = None
    max_fail_percentage: float | None = None
    command_timeout_s: float = 600.0
    host_timeout_s: float = 3600.0
    check: bool = False
    diff: bool = False
    break_lock: bool = False
    lock_owner: str = "vllmctl"
    # After a host converged, or failed in its services phase: record, gate, keep or roll back its release
    # (release_gate.gate_host). Gets `lock()` (takes the host lock if the converge did not) and the services
    # failure ("" if none); returns the outcome's JSON, whose "ok" decides the host's status.
    after_host: AfterHost | None = None
    # A host the rollout held back before its engines stopped (release_gate.keep_current): put the units of
    # the release it serves back in place; returns what it is left on.
    after_held: AfterHeld | None = None
    # the rollout: asked before a host's engines stop (and drains it from the gateway), told after its
    # release is decided; it holds a host back when the rollout stopped or a model would lose its replicas
    guard: EngineGuard | None = None
    stop: threading.Event = STOP  # set by a signal: each host stops at its next step boundary
    # hosts run alone before every other (the seeds of a hub model's fan-out), then `after_first` is told
    # their results before the next batch starts (the fan-out from them)
    first: tuple[str, ...] = ()
    after_first: Callable[[Mapping[str, HostResult]], None] | None = None


Event = Callable[[str, str, str], None]  # host, phase, what is happening


class HeldBack(VllmctlError):
    """The rollout did not let this host stop its engines: it keeps serving the release it had."""


def _tail(text: str) -> str:
    text = redact_text(text.strip())  # a tool may print its index URL, credentials included
    return text if len(text) <= TAIL else "…" + text[-TAIL:]


class HostRun:
    def __init__(
        self,
        ctx: HostContext,
        remote: Remote,
        playbook: Playbook,
        opts: RunOptions,
        clock: Callable[[], float],
    ) -> None:
        self.ctx, self.remote, self.playbook, self.opts, self.clock = ctx, remote, playbook, opts, clock
        self.result = HostResult(ctx.host.name)
        self.deadline = clock() + opts.host_timeout_s
        # time spent waiting for its turn in the rollout: it follows the peers' own deadlines, so it extends
        # this host's deadline instead of spending it (the 20th replica of a slow model would run out)
        self.waited_s = 0.0
        self.waiting_since: float | None = None
        self.locked = False
        self.out = False  # taken out of service by the rollout guard; put back in `finally`
        self.released = False  # the gate ran, or the services phase failed: a failure here is the release's

    def timeout(self) -> float:
        return self.limit()[0]

    def turn_wait_s(self) -> float:
        """Seconds this host has waited for its rollout turn, the wait under way included."""
        since = self.waiting_since
        return self.waited_s + (self.clock() - since if since is not None else 0.0)

    def limit(self, action: object = None) -> tuple[float, str]:
        """Seconds `action` may run, and which limit that is: a wait with its own deadline (the health
        wait) gets it plus a margin, any other command --timeout; never past the host's deadline."""
        left = self.deadline - self.clock()
        if left <= 0:
            raise VllmctlError(
                f"{self.ctx.host.name}: host deadline of {self.opts.host_timeout_s:g}s exceeded",
                "raise --host-timeout or look at what is slow on the host",
            )
        wait = action.wait_s if isinstance(action, Command) else None
        if isinstance(action, (WaitForReboot, RebootWhenStale)):  # a reboot's own deadline, not --timeout
            wait = action.timeout_s
        if wait is not None:
            limit, which = wait + WAIT_MARGIN_S, f"its own {wait:g} s wait + {WAIT_MARGIN_S:g} s"
        else:
            limit, which = self.opts.command_timeout_s, f"--timeout {self.opts.command_timeout_s:g}"
        if left < limit:
            return left, f"the host's --host-timeout {self.opts.host_timeout_s:g}"
        return limit, which

    def run(self, emit: Event) -> HostResult:
        """A no-op run takes no lock and writes nothing; a changing run locks, then plans from facts read
        again under the lock, so a concurrent apply between the two reads cannot be overwritten blindly."""
        started = self.clock()
        try:
            # desired state does not depend on facts: expand each phase once, for the requests and the plan
            calls = [(phase, phase_calls(phase, self.ctx)) for phase in self.playbook.phases]
            requests = merge_requests(call for _, phase_list in calls for call in phase_list)
            emit(self.ctx.host.name, "facts", "gathering facts")
            lock_now = self.opts.break_lock and not self.opts.check
            owner = self.opts.lock_owner if lock_now else None
            facts = self.remote.begin(requests, owner, self.opts.break_lock, self.timeout())
            self.locked = lock_now
            self._note_stale()
            # planned once from these facts; planned again only from facts gathered later
            first = [plan_calls(phase_list, facts) for _, phase_list in calls]
            planned: list[list[Step]] | None = first
            changes = _any_change(first)
            if not self.locked and not changes:
                self.remote.keep_facts()
            if not self.opts.check and not self.locked and changes:
                emit(self.ctx.host.name, "facts", "locking and gathering facts again")
                facts = self.remote.begin(requests, self.opts.lock_owner, False, self.timeout())
                self.locked, planned = True, None
                self._note_stale()
            for index, (phase, phase_list) in enumerate(calls):
                steps = planned[index] if planned is not None else plan_calls(phase_list, facts)
                changed = self._run_steps(phase.name, steps, emit)
                if self.result.status != "ok":
                    break
                if phase.regather and changed and not self.opts.check:
                    emit(self.ctx.host.name, phase.name, "gathering facts again")
                    facts, planned = self.remote.gather(requests, self.timeout()), None
            failed_in = next((s.phase for s in self.result.steps if s.status == "failed"), "")
            self.released = failed_in == GATED_PHASE
            if self.opts.after_host and not self.opts.check and failed_in in ("", GATED_PHASE):
                self._stop_if_asked("its release gate")
                self._gate(emit)
        except HeldBack as exc:
            self.result.status, self.result.error = "skipped", exc.message
            self.result.hint = exc.hint
        except TransportError as exc:
            self._fail("unreachable", exc)
        except VllmctlError as exc:
            self._fail("failed", exc)
        finally:
            self._put_back()
            self.result.elapsed_s = self.clock() - started
            self._finish(self.locked)
        emit(self.ctx.host.name, "done", self.result.status)
        return self.result

    def _take_out(self, phase: str, step: Step, emit: Event) -> None:
        """Before the first step that stops, restarts or reboots what serves (its op says so, whatever the
        phase): the rollout's leave (and the gateway's drain), or HeldBack naming what the host keeps."""
        if self.opts.guard is None or self.out or not step.stops_engines:
            return
        name = self.ctx.host.name

        def said(why: str) -> None:
            emit(name, phase, f"waiting its turn: {why}")

        self.waiting_since = began = self.clock()
        try:
            refusal = self.opts.guard.take_out(name, said)
        finally:
            waited, self.waiting_since = self.clock() - began, None
            self.waited_s += waited
            self.deadline += waited
        if refusal:
            after = self.opts.after_held
            left = after(self.ctx, self.remote) if after is not None else "the engines it runs"
            raise HeldBack(f"{refusal}; left on {left}", "apply again once it can go")
        self.out = True
        self._stop_if_asked(f"{step.op} {step.target}")  # a signal during its last wait: put back unstopped

    def _put_back(self) -> None:
        """Tell the rollout how the host's release ended: a failed one counts against --max-fail whether
        its engines were restarted (taken out) or started fresh."""
        guard = self.opts.guard
        failure = self.result.error if self.result.status != "ok" else ""
        if guard is not None and not self.out and failure and self.released:
            guard.fail(self.ctx.host.name, failure)
        if not self.out or guard is None:
            return
        self.out = False
        try:
            lost = guard.put_back(self.ctx.host.name, failure)
        except VllmctlError as exc:
            lost = f"gateway: {exc.message}"
        if lost and self.result.status == "ok":
            self.result.status, self.result.error = "failed", lost
            self.result.hint = "see `show stat` on the gateway host and the engine's journal"

    def _lock(self) -> None:
        if not self.locked:
            self.remote.begin({}, self.opts.lock_owner, False, self.timeout())
            self.locked = True
            self._note_stale()

    def _stop_if_asked(self, before: str) -> None:
        if self.opts.stop.is_set():
            why = f"{reason()} before {before}"
            raise Interrupted(why, "apply again: it plans from what the host has now")

    def _note_stale(self) -> None:
        if self.remote.stale_broken:
            self.result.broke_lock = self.remote.stale_broken

    def _gate(self, emit: Event) -> None:
        assert self.opts.after_host is not None
        emit(self.ctx.host.name, "release", "health, smoke benchmark, gate")
        self.released = True
        earlier = self.result.error if self.result.status != "ok" else ""
        self.result.release = self.opts.after_host(self.ctx, self.remote, self._lock, earlier)
        if not self.result.release.get("ok", True):
            release = self.result.release
            self.result.status = "failed"
            self.result.error = f"release {release.get('release')}: {release.get('status')}"
            self.result.hint = "\n".join(release.get("reasons", [])) or "see `vllmctl history`"

    def _fail(self, status: str, exc: VllmctlError) -> None:
        """A failure after an earlier one (the rollback after a health wait that ran out) keeps the first
        in front: it is the cause."""
        earlier = self.result.error if self.result.status != "ok" else ""
        self.result.status = "unreachable" if status == "unreachable" else "failed"
        self.result.error = f"{earlier}; then {exc.message}" if earlier else exc.message
        self.result.hint = exc.hint

    def _run_steps(self, phase: str, steps: Sequence[Step], emit: Event) -> bool:
        changed = False
        for step in steps:
            if not step.changed:
                self.result.steps.append(StepResult(phase, step, "ok"))
                continue
            changed = True
            diff = self._diff(step) if self.opts.diff else ""
            if self.opts.check:
                self.result.steps.append(StepResult(phase, step, "planned", diff=diff))
                continue
            self._stop_if_asked(f"{step.op} {step.target}")
            emit(self.ctx.host.name, phase, f"{step.op} {step.target}")
            self._take_out(phase, step, emit)
            note = ""
            for action in step.actions:
                limit, which = self.limit(action)
                outcome = self.remote.execute(action, limit)
                if isinstance(action, RebootWhenStale) and outcome.stdout.startswith(REBOOTED):
                    note = outcome.stdout.strip()
                    emit(self.ctx.host.name, phase, note.splitlines()[0])
                if not outcome.ok:
                    timed_out = f"timed out after {limit:.0f} s ({which})"
                    reason = timed_out if outcome.timed_out else f"exit {outcome.exited}"
                    error = f"{action.render()}: {reason}"
                    tail = _tail(outcome.stderr or outcome.stdout)
                    self.result.steps.append(StepResult(phase, step, "failed", error, tail, diff))
                    self.result.status, self.result.error = "failed", f"{step.op} {step.target}: {error}"
                    if step.warnings:  # a check step's findings, each with its fix (the GPU health gate)
                        self.result.hint = "\n".join(step.warnings)
                    return changed
            self.result.steps.append(StepResult(phase, step, "changed", diff=diff, note=note))
        return changed

    def _diff(self, step: Step) -> str:
        change = step.change
        if change is None:
            return ""
        if change.secret:
            return f"{change.path}: content changed (secret, not shown)\n"
        old = self.remote.read_file(change.path, self.timeout()) if change.exists else ""
        return unified_diff(change.path, old or "", change.new_content)

    def _finish(self, locked: bool) -> None:
        if not locked:  # nothing was changed, so there is nothing to unlock or to audit on the host
            self.remote.close()
            return
        audit = json.dumps(
            {
                "time": self.clock(),
                "by": self.opts.lock_owner,
                "playbook": self.playbook.name,
                "status": self.result.status,
                **self.result.recap(),
                "error": self.result.error or None,
            },
            sort_keys=True,
        )
        try:
            # after a dropped connection this reconnects once, so the lock is not left behind
            self.remote.finish(audit, locked, min(30.0, self.opts.command_timeout_s))
        except VllmctlError as exc:
            self.result.hint = (self.result.hint + "; " if self.result.hint else "") + f"unlock failed: {exc}"
        finally:
            self.remote.close()


def _any_change(planned: Sequence[Sequence[Step]]) -> bool:
    return any(step.changed for steps in planned for step in steps)
