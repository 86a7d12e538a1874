"""The out-of-service records on their keeper hosts, over SSH: read, claimed by compare-and-set under a
host-side flock (two runs never both claim replicas of one model), released, and removed once healed with
an audit line; releases/out_of_service.py decides what each means."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.facts.lock_owner import is_stale
from vllmctl.inventory.model import Inventory
from vllmctl.ops import Command
from vllmctl.paths import AUDIT_LOG, OUT_DIR, OUT_LOCK, out_record
from vllmctl.releases.out_of_service import OutRecord, drain_holders, listing, parse_records
from vllmctl.render.quoting import shell_word
from vllmctl.runner.core.audit import pid_alive, this_controller
from vllmctl.runner.core.remote import Remote

CHANGED_EXIT = 76  # the claim found the records changed since they were read
LOCK_WAIT_S = 30

_LIST = (
    '_list() { for f in "$@"; do [ -f "$f" ] || continue; m=${f%/*}; '
    'printf \'%s/%s\\t%s\\n\' "${m##*/}" "${f##*/}" "$(head -n 1 "$f")"; done; }\n'
)


def read_script() -> str:
    return _LIST + f"_list {shell_word(OUT_DIR)}/*/*\n"


def _locked(body: str) -> str:
    return (
        f"umask 022 && mkdir -p {shell_word(OUT_DIR)} && exec 9>{shell_word(OUT_LOCK)} "
        f"&& flock -w {LOCK_WAIT_S} 9 || exit 1\n" + body
    )


def claim_script(seen: Mapping[str, str], writes: Sequence[OutRecord]) -> str:
    """Writes `writes` only while each model's records read as `seen` (model -> listing) did."""
    checks = "".join(
        f'[ "$(_list {shell_word(f"{OUT_DIR}/{model}")}/*)" = {shell_word(text)} ] '
        f"|| {{ echo changed; exit {CHANGED_EXIT}; }}\n"
        for model, text in sorted(seen.items())
    )
    written = "".join(
        f"mkdir -p {shell_word(f'{OUT_DIR}/{r.model}')} && "
        f"printf '%s\\n' {shell_word(r.owner)} > {shell_word(out_record(r.model, r.server))}\n"
        for r in writes
    )
    return _locked(_LIST + checks + written)


def remove_script(records: Iterable[OutRecord], audit: str = "") -> str:
    """Removes each record only while it still names its owner (a run that claimed it since keeps it)."""
    lines = []
    for r in records:
        path = shell_word(out_record(r.model, r.server))
        lines.append(
            f'if [ "$(head -n 1 {path} 2>/dev/null)" = {shell_word(r.owner)} ]; then rm -f {path}; fi\n'
        )
    if audit:
        log_dir = AUDIT_LOG.rsplit("/", 1)[0]
        lines.append(f"mkdir -p {log_dir} && printf '%s\\n' {shell_word(audit)} >> {AUDIT_LOG}\n")
    return _locked("".join(lines))


@dataclass
class OutRecords:
    """One run's view of the records: `owner` is its own owner line; `keeper` maps a model to its keeper
    host. A keeper that cannot be reached holds no records (the rollout goes on as it would without)."""

    owner: str
    keeper: Mapping[str, str]
    connect: Callable[[str], Remote]
    timeout_s: float = 30.0
    alive: Callable[[int], bool] = pid_alive
    errors: list[str] = field(default_factory=list)
    _remotes: dict[str, Remote] = field(default_factory=dict)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def stale(self, owner: str) -> bool:
        return is_stale(owner, this_controller(), self.alive)

    def _run(self, host: str, script: str, sudo: bool = True) -> tuple[int, str]:
        with self._mutex:
            if host not in self._remotes:
                self._remotes[host] = self.connect(host)
            result = self._remotes[host].execute(Command(shell=script, sudo=sudo), self.timeout_s)
        return result.exited, result.stdout

    def read(self, models: Iterable[str]) -> list[OutRecord]:
        """Every record of `models`, from their keepers."""
        wanted = set(models)
        found: list[OutRecord] = []
        for host in sorted({self.keeper[m] for m in wanted if m in self.keeper}):
            try:
                # the records are world-readable (_locked's umask): a run that changes nothing runs no sudo
                code, out = self._run(host, read_script(), sudo=False)
            except VllmctlError as exc:
                self.errors.append(f"{host}: {exc.message}")
                continue
            if code == 0:
                found += [
                    r for r in parse_records(out) if r.model in wanted and self.keeper.get(r.model) == host
                ]
        return found

    def claim(self, writes: Sequence[OutRecord], seen: Sequence[OutRecord]) -> bool:
        """Write `writes` on their keepers while the records of their models are still `seen`; False (and
        nothing written) when another run changed them since."""
        done: list[OutRecord] = []
        for host in sorted({self.keeper[r.model] for r in writes}):
            mine = [r for r in writes if self.keeper[r.model] == host]
            models = {r.model for r in mine}
            expected = {m: listing(r for r in seen if r.model == m) for m in models}
            try:
                code, _ = self._run(host, claim_script(expected, mine))
            except VllmctlError as exc:
                self.errors.append(f"{host}: {exc.message}")
                continue
            if code == CHANGED_EXIT:
                self.remove(done)
                return False
            if code == 0:
                done += mine
        return True

    def remove(self, records: Sequence[OutRecord], audit: Mapping[str, object] | None = None) -> bool:
        """Remove `records` (each while it still names its owner), with `audit` in the keeper's log."""
        ok = True
        line = json.dumps({"time": time.time(), **audit}, sort_keys=True) if audit else ""
        for host in sorted({self.keeper[r.model] for r in records if r.model in self.keeper}):
            try:
                script = remove_script([r for r in records if self.keeper.get(r.model) == host], line)
                ok = self._run(host, script)[0] == 0 and ok
            except VllmctlError as exc:
                self.errors.append(f"{host}: {exc.message}")
                ok = False
        return ok

    def close(self) -> None:
        for remote in self._remotes.values():
            remote.close()
        self._remotes.clear()


def ssh_connect(inventory: Inventory) -> Callable[[str], Remote]:
    from vllmctl.runner.core.remote import SshRemote  # the edge: only a run that reads records connects
    from vllmctl.transport import SshTransport

    def connect(name: str) -> Remote:
        return SshRemote(SshTransport(inventory.hosts[name]))

    return connect


def with_holders(inventory: Inventory, view: dict[str, dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """`view` (runner/gateway/control.gateway_view's) with each drained server's `holder`: the run that
    holds it out, or none (its run died, or a person drained it)."""
    spec = inventory.gateway
    if spec is None or not view:
        return view
    records = OutRecords("", {m: spec.hosts[0] for m in spec.ports}, ssh_connect(inventory), timeout_s)
    try:
        found = records.read(spec.ports)
    finally:
        records.close()
    for seen in view.values():
        servers = seen.get("servers", {})
        statuses = {ref: str(stat["status"]) for ref, stat in servers.items()}
        for ref, holder in drain_holders(statuses, found, records.stale).items():
            servers[ref]["holder"] = {**holder.to_json(), "said": holder.describe()}
    return view
