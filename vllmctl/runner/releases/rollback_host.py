"""One host's rollback under its lock: the target chosen from the releases still on the host, its units
re-activated (stop, units from the release, start) and its health waited for; the audit line either way."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllmctl.errors import VllmctlError
from vllmctl.releases.host import rollback_target
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.releases.release import GateOptions, activate, audit_line, read_releases
from vllmctl.tasks.desired import HostContext


@dataclass(frozen=True)
class HostRollback:
    host: str
    ok: bool
    from_id: str | None = None
    to_id: str | None = None
    seconds: float = 0.0  # rollback started → every endpoint healthy (or gave up)
    reasons: tuple[str, ...] = ()
    figures: dict[str, object] = field(default_factory=dict)
    broke_lock: str = ""  # the owner of a stale lock (its run died on this controller) this run broke
    noop: bool = False  # already on its release and serving: nothing stopped

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "from": self.from_id,
            "to": self.to_id,
            "seconds": round(self.seconds, 2),
            "reasons": list(self.reasons),
            "figures": self.figures,
            "broke_lock": self.broke_lock or None,
            "noop": self.noop,
        }


def roll_back_host(
    ctx: HostContext, remote: Remote, opts: GateOptions, to: str | None = None, break_lock: bool = False
) -> HostRollback:
    """Under the host lock: choose the target, stop → units from the release → start, wait for health."""
    host = ctx.host.name
    remote.begin({}, opts.owner, break_lock, opts.command_timeout_s)
    broke = remote.stale_broken
    audit: dict[str, object] = {"to": to}
    try:
        state = read_releases(remote, host, opts.command_timeout_s)
        target = rollback_target(state, host, to)
        assert target.manifest is not None
        started = opts.clock()
        verdict = activate(remote, ctx, target.manifest, opts)
        elapsed = opts.clock() - started
        outcome = HostRollback(
            host, verdict.passed, state.current, target.id, elapsed, verdict.reasons, verdict.figures, broke
        )
        audit = outcome.to_json()
        return outcome
    except VllmctlError as exc:
        audit["error"] = exc.message
        raise
    finally:
        remote.finish(audit_line(opts.owner, "rollback", audit), True, opts.command_timeout_s)
