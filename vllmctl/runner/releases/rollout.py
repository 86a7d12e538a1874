"""Rollouts at the edge: every flow that stops engines (apply, rollback, group releases) asks here before a
host's engines stop and reports here once its release is decided. Who serves is read live (HAProxy's
`show stat` for models behind the gateway, each replica's /health otherwise); releases/rollout.py decides."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.facts.lock_owner import parse_owner
from vllmctl.inventory.model import Inventory
from vllmctl.releases.canary import Canaries, WaveLog, max_out
from vllmctl.releases.canary_check import CanaryBounds
from vllmctl.releases.out_of_service import OutRecord, claims, held_hosts, keepers, sort_records
from vllmctl.releases.rollout import Decision, MaxFail, RolloutLedger, ServingReplica, may_take_out
from vllmctl.releases.waves import RolloutLimits
from vllmctl.runner.core.engine_guard import Waiting
from vllmctl.runner.core.interrupt import STOP, reason
from vllmctl.runner.gateway.control import GatewayControl
from vllmctl.runner.gateway.out_records import OutRecords, ssh_connect
from vllmctl.runner.releases.canary_soak import SoakJudge, engine_reader
from vllmctl.runner.releases.serving import Probe, Serving, health_probe
from vllmctl.tasks.desired import ModelPlan, Replica
from vllmctl.transport.target import http_address
from vllmctl.transport.tunnel import base_url

POLL_S = 1.0
DEFAULT_WAIT_S = 300.0


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
    max_out: dict[str, int] = field(default_factory=dict)  # model -> its hosts out at once (default 1)
    canaries: Canaries = field(default_factory=lambda: Canaries({}))  # no limits given: no canary
    waves: WaveLog = field(default_factory=WaveLog)
    soak: SoakJudge | None = None  # compares a soaked canary with its peers (models behind the gateway)
    # multi-node models' servers behind the gateway: their group release takes them out, never a host's
    # rollout; a dead run's drains of them are healed with the others (runner/releases/orphans.py)
    group_servers: list[ServingReplica] = field(default_factory=list)
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
                decision = may_take_out(host, models, self.replicas, self.serving(models), out, self.max_out)
                self._judge(decision.counted, out)
                canary = self.canaries.verdict(decision.counted, out, self.clock())
                if decision.verdict == "go" and canary.verdict == "stop":
                    return self._held(host, canary.reason)
                if decision.verdict == "go" and canary.verdict == "go" and self._claim(host):
                    self.ledger.out.add(host)  # its canary slots too: under the lock, before the next host
                    self.canaries.took(host, canary.canary_of)
                    self.waves.out(host, canary.canary_of, time.time())
                    break
                if decision.verdict == "go" and canary.verdict == "wait":
                    decision = Decision("wait", canary.reason)
                    deadline = self.clock() + self.wait_s  # the canary progresses within its own deadlines
                elif decision.peers_out and set(decision.peers_out) <= self.ledger.out:
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
        went = {"host": host, "event": "out", "notes": list(decision.notes), "time": time.time()}
        self.events.append({**went, "canary": list(canary.canary_of)} if canary.canary_of else went)
        if self.gateway is not None:
            self.gateway.drain(host)
        return ""

    def _judge(self, models: Iterable[str], out: Collection[str]) -> None:
        """Each model whose canaries just served their soak: compared once with its peers (under the lock)."""
        now = self.clock()
        for model in models:
            if self.soak is None or model in self.canaries.judged or not self.canaries.soaked(model, now):
                continue
            limits = self.canaries.limits.get(model, RolloutLimits())
            bounds = {model: CanaryBounds(limits.max_error_rate, limits.max_latency_ratio)}
            self.canaries.reject(model, self.soak.verdict(model, self.canaries.chosen[model], out, bounds))
            for host in self.canaries.chosen[model] if self.canaries.judged[model] else ():
                self.ledger.fail(host, self.canaries.failed[host])  # counted against --max-fail

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
            self.canaries.returned(host, failure or lost, self.clock())
            canary_of = [m for m, hosts in self.canaries.chosen.items() if host in hosts]
            if self.soak is not None and canary_of and not (failure or lost):
                self.soak.begin(canary_of)
            self.waves.returned(host, time.time())
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
    inventory: Inventory, plans: Mapping[str, Mapping[str, ModelPlan]], group_servers: bool = False
) -> list[ServingReplica]:
    """Every single-host replica of every model, from the plans where known (else the model's first port);
    models behind the gateway are named as its servers. Multi-node models restart as group releases
    (`group_servers`: every node of their group named as a server, with the model's port)."""
    behind = inventory.gateway.ports if inventory.gateway is not None else {}
    found = []
    for model in inventory.models.values():
        if (model.cluster is not None) != group_servers:
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
    (the run's lock owner line) it keeps out-of-service records other runs read
    (runner/gateway/out_records.py)."""
    known = inventory.hosts

    def url_of(replica: ServingReplica) -> str:
        return base_url(known[replica.host], replica.port) if replica.port else replica.url

    probe = probe or health_probe(api_keys or {}, url_of)
    replicas = serving_replicas(inventory, plans)
    minimum = {m.name: m.min_available for m in inventory.models.values()}
    limits = {m.name: m.limits for m in inventory.models.values()}
    hosts_of: dict[str, set[str]] = {}
    for replica in replicas:
        hosts_of.setdefault(replica.model, set()).add(replica.host)
    guard = RolloutGuard(replicas, minimum, RolloutLedger(max_fail, hosts), gateway, probe, wait_s, stop=stop)
    guard.max_out, guard.canaries = max_out(limits, hosts_of), Canaries(limits)
    guard.soak = SoakJudge(gateway, replicas, engine_reader(url_of)) if gateway is not None else None
    behind = inventory.gateway.ports if inventory.gateway is not None else {}
    guard.group_servers = [r for r in serving_replicas(inventory, {}, True) if r.model in behind]
    if parse_owner(owner) is not None:  # an owner no later run can judge would hold its replicas for good
        guard.records = ssh_out_records(inventory, [*replicas, *guard.group_servers], owner)
    return guard


def ssh_out_records(inventory: Inventory, replicas: list[ServingReplica], owner: str) -> OutRecords:
    spec = inventory.gateway
    keeper = keepers(replicas, spec.hosts if spec else (), spec.ports if spec else {})
    return OutRecords(owner, keeper, ssh_connect(inventory))
