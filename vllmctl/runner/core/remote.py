"""What the runner asks of a host (gather, lock, execute an action, finish), and the SSH-backed one.

The lock is an atomic `mkdir` with an owner file; the audit line is appended when a changing run ends.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from vllmctl.errors import VllmctlError
from vllmctl.facts.lock_owner import Controller, is_stale
from vllmctl.facts.script import build_script, one_write, parse_sections, section, split_sections
from vllmctl.facts.witness import (
    covers,
    live_requests,
    settled,
    witness_command,
    witness_lines,
    witness_words,
    witnessed_paths,
)
from vllmctl.ops import Action, Command, Upload
from vllmctl.ops.model_stage import PushFile
from vllmctl.ops.reboot import RebootWhenStale, WaitForReboot
from vllmctl.paths import AUDIT_LOG, LOCK_DIR
from vllmctl.render.quoting import shell_word
from vllmctl.runner.core.audit import pid_alive, this_controller
from vllmctl.runner.core.fact_cache import FactCache, Snapshot, requests_json
from vllmctl.runner.core.reboot import reboot_when_stale, wait_for_reboot
from vllmctl.transport import Result, SshTransport

LOCKED_MARK = "@@vllmctl-locked"
LOCKED_EXIT = 75

Requests = Mapping[str, tuple[str, ...]]
StepAction = Action | PushFile | WaitForReboot | RebootWhenStale  # what a step may hold


class HostLockedError(VllmctlError):
    """Another apply holds this host's lock."""

    def __init__(self, host: str, owner: str) -> None:
        self.owner = owner
        super().__init__(
            f"{host}: locked by another apply ({owner or 'owner unknown'})",
            "wait for it to finish; if it died, run again with --break-lock",
        )


class Remote(Protocol):
    stale_broken: str  # the owner of a stale lock the last `begin` broke ("" when none)

    def begin(
        self, requests: Requests, lock_owner: str | None, break_lock: bool, timeout: float
    ) -> dict[str, Any]:
        """Gather facts after taking the lock, or (lock_owner None) after checking it is free; a stale lock
        (its owner died on this controller) is broken first."""
        ...

    def gather(self, requests: Requests, timeout: float) -> dict[str, Any]: ...

    def keep_facts(self) -> None:
        """The facts the last unlocked `begin` read plan no change: a later run may reuse them while their
        witness reads the same."""
        ...

    def execute(self, action: StepAction, timeout: float) -> Result: ...

    def read_file(self, path: str, timeout: float) -> str | None: ...

    def finish(self, audit_line: str | None, release_lock: bool, timeout: float) -> None: ...

    def close(self) -> None: ...


def _refuse_if_held() -> str:
    return f"then echo {LOCKED_MARK}; cat {LOCK_DIR}/owner 2>/dev/null; exit {LOCKED_EXIT}; fi\n"


def lock_script(owner: str, break_lock: bool) -> str:
    return (
        f"mkdir -p {shell_word(LOCK_DIR.rsplit('/', 1)[0])}\n"
        + (f"rm -rf {LOCK_DIR}\n" if break_lock else "")
        + f"if ! mkdir {LOCK_DIR} 2>/dev/null; {_refuse_if_held()}"
        + f"printf '%s\\n' {shell_word(owner)} > {LOCK_DIR}/owner\n"
    )


def break_stale_script(owner: str, audit_line: str) -> str:
    """Removes the lock only while it still names `owner` (a run that took it since keeps it), and says so
    in the host's audit log."""
    log_dir = AUDIT_LOG.rsplit("/", 1)[0]
    return (
        f'if [ "$(cat {LOCK_DIR}/owner 2>/dev/null)" = {shell_word(owner)} ]; then rm -rf {LOCK_DIR}; '
        f"mkdir -p {log_dir} && printf '%s\\n' {shell_word(audit_line)} >> {AUDIT_LOG}; fi"
    )


def raise_if_locked(host: str, result: Result) -> None:
    """HostLockedError naming the owner when `result` is a lock or probe script's refusal."""
    if result.exited == LOCKED_EXIT and result.stdout.startswith(LOCKED_MARK):
        raise HostLockedError(host, result.stdout[len(LOCKED_MARK) :].strip())


def probe_script() -> str:
    """Fail early when another apply holds the lock, without taking it (a no-op run writes nothing)."""
    return f"if [ -d {LOCK_DIR} ]; {_refuse_if_held()}"


def finish_script(release_lock: bool, audit: bool) -> str:
    parts = [f"rm -rf {LOCK_DIR}"] if release_lock else []
    if audit:
        parts.append(f"mkdir -p {AUDIT_LOG.rsplit('/', 1)[0]} && cat >> {AUDIT_LOG}")
    return "; ".join(parts) or "true"


WITNESS = "@@witness"
HOST_TIME = "@@host-time"


def reuse_script(requests: Requests, words: tuple[list[str], list[str]], known: list[str]) -> str:
    """What a no-op run over kept facts runs as the SSH user: the lock probe, the witness (`known`: the
    paths the kept witness saw) and the live facts."""
    witness = witness_command([*words[0], *known], words[1])
    return one_write(probe_script() + section(WITNESS, witness) + build_script(live_requests(requests)))


class SshRemote:
    """`cache` turns on the no-op fast path: an unlocked `begin` first reads the witness of the facts an
    earlier no-op run kept, as the SSH user (no sudo, no PID 1), and reuses those facts when it matches."""

    def __init__(
        self,
        transport: SshTransport,
        cache: FactCache | None = None,
        here: Controller | None = None,
        alive: Callable[[int], bool] = pid_alive,
    ) -> None:
        self.transport = transport
        self.name = transport.host.name
        self.cache = cache
        self.here, self.alive = here, alive
        self.stale_broken = ""
        self.reused = False  # the last begin's facts came from the cache
        self._candidate: Snapshot | None = None  # what the last begin read under sudo, fit to be kept

    def begin(
        self, requests: Requests, lock_owner: str | None, break_lock: bool, timeout: float
    ) -> dict[str, Any]:
        self.stale_broken = ""
        try:
            return self._begin(requests, lock_owner, break_lock, timeout)
        except HostLockedError as exc:
            if self.here is None:
                self.here = this_controller()
            if not is_stale(exc.owner, self.here, self.alive):
                raise
            record = {"time": time.time(), "by": lock_owner, "event": "broke stale lock", "owner": exc.owner}
            script = break_stale_script(exc.owner, json.dumps(record, sort_keys=True))
            result = self.transport.run(script, sudo=True, timeout=timeout)
            if not result.ok:
                raise replace(result, host=self.name).error("breaking a stale lock") from exc
            facts = self._begin(requests, lock_owner, break_lock, timeout)
            self.stale_broken = exc.owner
            return facts

    def _begin(
        self, requests: Requests, lock_owner: str | None, break_lock: bool, timeout: float
    ) -> dict[str, Any]:
        self.reused, self._candidate = False, None
        if lock_owner:
            if self.cache is not None:  # the host is about to change: the next run need not try the witness
                with contextlib.suppress(OSError):
                    self.cache.forget(self.transport.target)
            return self._gather(lock_script(lock_owner, break_lock), requests, timeout)
        words = witness_words(requests) if self.cache is not None else None
        if words is None:
            return self._gather(probe_script(), requests, timeout)
        kept = self.cache.load(self.transport.target) if self.cache is not None else None
        if kept is not None and kept.requests == requests_json(requests):
            facts = self._reuse(kept, requests, words, timeout)
            if facts is not None:
                self.reused = True
                return facts
        return self._gather_witnessed(requests, words, timeout)

    def gather(self, requests: Requests, timeout: float) -> dict[str, Any]:
        return self._gather("", requests, timeout)

    def keep_facts(self) -> None:
        if self.cache is not None and self._candidate is not None:
            # a cache that cannot be written costs the next run its fast path, nothing else
            with contextlib.suppress(OSError):
                self.cache.store(self.transport.target, self._candidate)
        self._candidate = None

    def _reuse(
        self, kept: Snapshot, requests: Requests, words: tuple[list[str], list[str]], timeout: float
    ) -> dict[str, Any] | None:
        """The kept facts when the witness reads as it did (the live facts read afresh), else None."""
        live = live_requests(requests)
        script = reuse_script(requests, words, witnessed_paths(kept.witness))
        result = self.transport.run(script, sudo=False, timeout=timeout)
        raise_if_locked(self.name, result)
        if not result.ok:
            return None
        sections = split_sections(result.stdout)
        if witness_lines(sections.get(WITNESS, ("", 1))[0]) != kept.witness:
            return None
        fresh = parse_sections(live, result.stdout)
        if set(fresh) != set(live):
            return None
        return {**kept.facts, **fresh}

    def _gather_witnessed(
        self, requests: Requests, words: tuple[list[str], list[str]], timeout: float
    ) -> dict[str, Any]:
        """Every fact under sudo, the witness read just before them: a change made while the facts are
        read shows in the next witness, never hidden behind it."""
        witness = section(WITNESS, witness_command(*words)) + section(HOST_TIME, "date +%s.%N")
        script = one_write(probe_script() + witness + build_script(requests))
        result = self._run_gather(script, timeout)
        sections = split_sections(result.stdout)
        facts = parse_sections(requests, result.stdout)
        lines = witness_lines(sections.get(WITNESS, ("", 1))[0])
        try:
            host_time = float(sections.get(HOST_TIME, ("", 1))[0].strip())
        except ValueError:
            return facts
        complete = set(facts) == set(requests) and covers(lines, requests, facts)
        if complete and settled(lines, host_time):
            self._candidate = Snapshot(requests_json(requests), lines, facts)
        return facts

    def _gather(self, prefix: str, requests: Requests, timeout: float) -> dict[str, Any]:
        result = self._run_gather(one_write(prefix + build_script(requests)), timeout)
        return parse_sections(requests, result.stdout)

    def _run_gather(self, script: str, timeout: float) -> Result:
        result = self.transport.run(script, sudo=True, timeout=timeout)
        raise_if_locked(self.name, result)
        if not result.ok:
            raise replace(result, host=self.name).error("gathering facts")
        return result

    def execute(self, action: StepAction, timeout: float) -> Result:
        if isinstance(action, PushFile):
            return self.transport.put_file(
                action.source,
                action.path,
                action.sha256,
                action.mode,
                action.owner,
                action.group,
                timeout,
                root=action.root,
            )
        if isinstance(action, WaitForReboot):
            return wait_for_reboot(self.transport, action.boot_id, min(timeout, action.timeout_s))
        if isinstance(action, RebootWhenStale):
            return reboot_when_stale(self.transport, action, timeout)
        if isinstance(action, Upload):
            return self.transport.put(
                action.content.encode(), action.path, action.mode, action.owner, action.group, timeout=timeout
            )
        assert isinstance(action, Command)
        stdin = action.stdin or None
        return self.transport.run(action.render(), sudo=action.sudo, timeout=timeout, stdin=stdin)

    def read_file(self, path: str, timeout: float) -> str | None:
        result = self.transport.run(["cat", "--", path], sudo=True, timeout=timeout)
        return result.stdout if result.ok else None

    def finish(self, audit_line: str | None, release_lock: bool, timeout: float) -> None:
        stdin = (audit_line + "\n").encode() if audit_line else None
        self.transport.run(finish_script(release_lock, audit_line is not None), True, timeout, stdin)

    def close(self) -> None:
        self.transport.close()
