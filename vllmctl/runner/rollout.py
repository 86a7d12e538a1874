"""Rollouts at the edge: every flow that stops engines (apply, rollback, group releases) asks here before a
host's engines stop and reports here once its release is decided. Who serves is read live (HAProxy's
`show stat` for models behind the gateway, each replica's /health otherwise); releases/rollout.py decides."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllmctl.errors import VllmctlError
from vllmctl.facts.lock_owner import parse_owner
from vllmctl.inventory.model import Inventory
from vllmctl.releases.out_of_service import OutRecord, claims, held_hosts, keepers, sort_records
from vllmctl.releases.rollout import MaxFail, RolloutLedger, ServingReplica, may_take_out
from vllmctl.runner.gateway import GatewayControl
from vllmctl.runner.interrupt import STOP, reason
from vllmctl.runner.out_records import OutRecords, ssh_connect
from vllmctl.tasks.desired import ModelPlan, Replica
from vllmctl.transport.target import http_address
from vllmctl.transport.tunnel import base_url

POLL_S = 1.0
PROBE_TIMEOUT_S = 3.0
DEFAULT_WAIT_S = 300.0

Probe = Callable[[ServingReplica], bool]  # does it answer /health and list its model?
Waiting = Callable[[str], None]  # why a host waits for its turn, said when that changes


class EngineGuard(Protocol):
    """What a run calls around stopping a host's engines."""

    def take_out(self, host: str, waiting: Waiting | None = None) -> str:
        """Block until `host` may stop its engines (then it is out of service, drained from the gateway):
        "" then, or why it must not (the run was interrupted, the rollout stopped, or a model would lose its
        last replicas). `waiting` is told why the host waits, each time that changes."""
        ...

    def put_back(self, host: str, failure: str) -> str:
        """After its release is decided (`failure` "" when it passed): back into rotation, counted; returns
        why the host is given up as failed when its release passed but it did not come back."""
        ...

    def fail(self, name: str, why: str) -> None:
        """A failure outside take_out/put_back (a group release) counted against --max-fail."""
        ...

    @property
    def stopped(self) -> str: ...


def health_probe(
    api_keys: Mapping[str, str], url_of: Callable[[ServingReplica], str] = lambda r: r.url
) -> Probe:
    """One attempt of the release gate's own readiness probe (GET /health, then /v1/models listing the
    model: another engine on the port does not count), with the model's API key, at `url_of` the replica
    (tunnelled where its host needs it: the forward opens only for a replica probed)."""

    def probe(replica: ServingReplica) -> bool:
        import httpx

        from vllmctl.bench.health import probe as ready

        with httpx.Client(trust_env=False) as client:
            key = api_keys.get(replica.model)
            return ready(client, url_of(replica), replica.model, PROBE_TIMEOUT_S, key)[0] == "ready"

    return probe


class Serving(Container[str]):
    """Which refs serve, asked lazily: the gateway's UP set for models behind it (read once), each engine's
    /health otherwise (each asked at most once)."""

    def __init__(
        self, replicas: Iterable[ServingReplica], up: set[str] | None, behind: Container[str], probe: Probe
    ):
        self.by_ref = {r.ref: r for r in replicas}
        self.up, self.behind, self.probe = up, behind, probe
        self.asked: dict[str, bool] = {}

    def __contains__(self, ref: object) -> bool:
        replica = self.by_ref.get(str(ref))
        if replica is None:
            return False
        if self.up is not None and replica.model in self.behind:
            return replica.ref in self.up
        if replica.ref not in self.asked:
            self.asked[replica.ref] = self.probe(replica)
        return self.asked[replica.ref]


@dataclass
class RolloutGuard:
    """The rollout's ledger behind one lock: hosts out of service, failures, the wait for replicas to serve;
    `events` records each host taken out, held back or put back, for the JSON report.

    A host waiting for a peer this run holds out of service waits as long as that peer is out: the peer
    is bounded by its own deadlines (health wait, gate, --host-timeout), which can be far longer than
    `wait_s` for a big model. `wait_s` (--wait-available) bounds only a wait for replicas that nothing in
    this run is bringing back, counted from the moment the last such peer came back."""

    replicas: list[ServingReplica]
    min_available: dict[str, int]  # model -> replicas that must keep serving
    ledger: RolloutLedger
    gateway: GatewayControl | None = None
    probe: Probe = field(default_factory=lambda: health_probe({}))
    wait_s: float = DEFAULT_WAIT_S
    poll_s: float = POLL_S
    clock: Callable[[], float] = time.monotonic
    events: list[dict[str, Any]] = field(default_factory=list)
    records: OutRecords | None = None  # other runs' out-of-service records; None: this process only
    stop: threading.Event = STOP  # the run's stop (a signal): a waiting host refuses its turn at once
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _seen: dict[str, list[OutRecord]] = field(default_factory=dict)  # host -> records its last decision read

    @property
    def stopped(self) -> str:
        with self._cond:
            return self.ledger.stopped

    def fail(self, name: str, why: str) -> None:
        with self._cond:
            self.ledger.fail(name, why)
            self._cond.notify_all()

    def serving(self, models: Iterable[str]) -> Serving:
        """Who of `models` serves now: UP on every gateway host or, where no gateway answers for a model,
        each replica that passes `probe` (the gate's readiness probe by default)."""
        names = set(models)
        wanted = [r for r in self.replicas if r.model in names]
        up: set[str] | None = None
        behind: Container[str] = self.gateway.gateway.ports if self.gateway is not None else {}
        if any(r.model in behind for r in wanted):
            assert self.gateway is not None
            try:
                up = self.gateway.up_refs()
            except VllmctlError:
                up = None  # not installed yet, or down: the engines themselves say who serves
        return Serving(wanted, up, behind, self.probe)

    def take_out(self, host: str, waiting: Waiting | None = None) -> str:
        models = {r.model: self.min_available.get(r.model, 1) for r in self.replicas if r.host == host}
        deadline = self.clock() + self.wait_s
        said = ""
        with self._cond:
            while True:
                if self.stop.is_set():  # its engines must not restart later in this run
                    return self._held(host, f"{reason()} while it waited for its turn")
                if self.ledger.stopped:
                    return self._held(host, self.ledger.stopped)
                out = self._out(host)
                decision = may_take_out(host, models, self.replicas, self.serving(models), out)
                if decision.verdict == "go" and self._claim(host):
                    self.ledger.out.add(host)
                    break
                if decision.peers_out and set(decision.peers_out) <= self.ledger.out:
                    # this run's own peers progress within their own deadlines: --wait-available counts from
                    # when they are back; another run's, which this one cannot watch, get --wait-available
                    deadline = self.clock() + self.wait_s
                elif self.clock() >= deadline:
                    why = f"held back after waiting {self.wait_s:g} s: {decision.reason}"
                    return self._held(host, why)
                if waiting is not None and decision.reason != said:
                    said = decision.reason
                    waiting(said)
                self._cond.wait(self.poll_s)
        self.events.append({"host": host, "event": "out", "notes": list(decision.notes), "time": time.time()})
        if self.gateway is not None:
            self.gateway.drain(host)
        return ""

    def _held(self, host: str, why: str) -> str:
        self.events.append({"host": host, "event": "held", "reason": why, "time": time.time()})
        return why

    def put_back(self, host: str, failure: str) -> str:
        """Readied in the gateway and waited for UP before the host counts as back: until then no other host
        of its models is taken out."""
        lost = ""
        readied = self.gateway is None or self.gateway.ready(host)
        if not readied and not failure and self.gateway is not None:
            lost = f"{host}: its release passed, but the gateway did not see it UP in time"
            said = self.gateway.host_events(host)[-1:]
            pending = said[0].get("pending") if said else None
            if pending:  # what HAProxy said last: its status and the check's result, per gateway and server
                shown = (
                    f"{where} {s.get('status')} (check {s.get('check') or '-'})"
                    for where, s in pending.items()
                )
                lost += f" ({'; '.join(shown)})"
            elif said and said[0].get("error"):
                lost += f" ({said[0]['error']})"
        if readied:  # else kept: once this run is gone, the next one puts the server back (heal)
            self._release(host)
        with self._cond:
            if failure or lost:
                self.ledger.fail(host, failure or lost)
            self.ledger.out.discard(host)
            self._cond.notify_all()
        back = {"host": host, "event": "back", "failed": bool(failure or lost), "time": time.time()}
        self.events.append(back)
        return lost

    def host_events(self, host: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["host"] == host]

    def _out(self, host: str) -> set[str]:
        """Hosts out of service: this run's, and those whose replicas of `host`'s models another live run
        holds (the records read are kept for `_claim`)."""
        if self.records is None:
            return self.ledger.out
        mine = {r.model for r in self.replicas if r.host == host}
        self._seen[host] = self.records.read(mine)
        foreign = sort_records(self._seen[host], self.records.owner, self.records.stale).foreign
        return self.ledger.out | held_hosts(foreign, mine)

    def _claim(self, host: str) -> bool:
        """Records `host`'s replicas as this run's, unless another run changed the records since `_out`."""
        if self.records is None:
            return True
        mine = {r.model for r in self.replicas if r.host == host}
        return self.records.claim(
            claims(host, mine, self.replicas, self.records.owner), self._seen.get(host, [])
        )

    def _release(self, host: str) -> None:
        if self.records is not None:
            mine = {r.model for r in self.replicas if r.host == host}
            self.records.remove(claims(host, mine, self.replicas, self.records.owner))

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
        if self.records is not None:
            self.records.close()


def serving_replicas(
    inventory: Inventory, plans: Mapping[str, Mapping[str, ModelPlan]]
) -> list[ServingReplica]:
    """Every single-host replica of every model, from the plans where known (else the model's first port);
    models behind the gateway are named as its servers. Multi-node models restart as group releases."""
    behind = inventory.gateway.ports if inventory.gateway is not None else {}
    found = []
    for model in inventory.models.values():
        if model.cluster is not None:
            continue
        for host in model.hosts:
            plan = plans.get(host, {}).get(model.name)
            address = http_address(inventory.hosts[host])
            for replica in plan.replicas if plan else (Replica(0, model.port),):
                url = f"http://{_bracketed(address)}:{replica.port}"
                ref = f"{model.name}/{host}-{replica.port}" if model.name in behind else url
                found.append(ServingReplica(model.name, host, ref, url, replica.port))
    return found


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def rollout_guard(
    inventory: Inventory,
    plans: Mapping[str, Mapping[str, ModelPlan]],
    hosts: int,
    max_fail: MaxFail,
    gateway: GatewayControl | None,
    wait_s: float = DEFAULT_WAIT_S,
    probe: Probe | None = None,
    api_keys: Mapping[str, str] | None = None,
    owner: str = "",
    stop: threading.Event = STOP,
) -> RolloutGuard:
    """The guard of one run; `probe` defaults to the gate's readiness probe with `api_keys`; with `owner`
    (the run's lock owner line) it keeps out-of-service records other runs read (runner/out_records.py)."""
    known = inventory.hosts
    probe = probe or health_probe(
        api_keys or {}, lambda r: base_url(known[r.host], r.port) if r.port else r.url
    )
    replicas = serving_replicas(inventory, plans)
    minimum = {m.name: m.min_available for m in inventory.models.values()}
    guard = RolloutGuard(replicas, minimum, RolloutLedger(max_fail, hosts), gateway, probe, wait_s, stop=stop)
    if parse_owner(owner) is not None:  # an owner no later run can judge would hold its replicas for good
        guard.records = ssh_out_records(inventory, replicas, owner)
    return guard


def ssh_out_records(inventory: Inventory, replicas: list[ServingReplica], owner: str) -> OutRecords:
    spec = inventory.gateway
    keeper = keepers(replicas, spec.hosts if spec else (), spec.ports if spec else {})
    return OutRecords(owner, keeper, ssh_connect(inventory))
