"""A group release behind the gateway: every node's API server drained on every gateway host before any
node's engine stops and set ready once the release is decided, each held meanwhile by an out-of-service
record on the model's keeper host, so a run killed in between leaves drains the next run heals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.facts.lock_owner import parse_owner
from vllmctl.gateway.config import Server, server_name
from vllmctl.inventory.model import Inventory
from vllmctl.releases.out_of_service import OutRecord
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.gateway.control import GatewayControl
from vllmctl.runner.gateway.out_records import OutRecords, ssh_connect

Log = Callable[[str], None]
HostConnect = Callable[[str], Remote]  # a gateway (or keeper) host's name -> its connection


@dataclass(frozen=True)
class GatewayAccess:
    """How a group release reaches the gateway hosts' runtime API and the records' keeper (None: SSH)."""

    connect: HostConnect | None = None
    records: HostConnect | None = None


@dataclass
class GroupGateway:
    """One group release's servers in the gateway: `take_out` claims their records and drains them,
    `serves` names those the release that runs after the verdict serves, `put_back` sets every one ready
    (waiting for UP on those) and removes their records."""

    model: str
    control: GatewayControl
    records: OutRecords | None
    out: list[Server] = field(default_factory=list)
    serving: set[str] = field(default_factory=set)  # refs the release running after the verdict serves

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.control.events

    def take_out(self, servers: Sequence[Server], log: Log) -> None:
        """Drain `servers` (those not out already) on every gateway host, each node's after the other."""
        taken = {s.ref for s in self.out}
        new = [s for s in servers if s.ref not in taken]
        if not new:
            return
        if self.records is not None:
            claims = [OutRecord(self.model, s.name, self.records.owner) for s in new]
            # the host lock keeps other group runs off these nodes: a lost claim is a heal that ran since the
            # read (it removes what it healed), so the claim is read and made again
            for _ in range(3):
                if self.records.claim(claims, self.records.read([self.model])):
                    break
        self.out += new
        self.control.servers += [s for s in new if s not in self.control.servers]
        for host in dict.fromkeys(s.host for s in new):
            self.control.drain(host)
            log(f"{host}: {_said(self.control.host_events(host)[-1])}")

    def serves(self, servers: Sequence[Server]) -> None:
        """The release that passed its gate (or served again after a rollback) runs these API servers."""
        self.serving = {s.ref for s in servers}

    def put_back(self, log: Log) -> list[str]:
        """Every server taken out set ready, whatever the gate decided, and waited for UP where the release
        that runs now serves it (a server it does not run stays out by HAProxy's checks); the records of
        those set ready (and UP where waited for) removed. Returns the refs not seen UP, whose records stay
        for the next run to heal."""
        lost: list[str] = []
        for host in dict.fromkeys(s.host for s in self.out):
            mine = [s for s in self.out if s.host == host]
            waited = [s.ref for s in mine if s.ref in self.serving]
            said = [s.ref for s in mine if s.ref not in self.serving]
            done = not said or self.control.ready_servers(host, said, wait=False)
            if waited and not self.control.ready_servers(host, waited):
                lost += waited
                done = False
            if done and self.records is not None:
                owner = self.records.owner
                self.records.remove([OutRecord(self.model, s.name, owner) for s in mine])
            log(f"{host}: {_said(self.control.host_events(host)[-1])}")
        self.out = []
        return lost

    def close(self) -> None:
        self.control.close()
        if self.records is not None:
            self.records.close()


def _said(event: dict[str, Any]) -> str:
    servers = ", ".join(event.get("servers", []))
    done = f"{servers} {event['event']} on the gateway"
    if event.get("error"):
        return f"{done}: {event['error']}"
    waited = f" after {event['waited_s']:g}s" if "waited_s" in event else ""
    left = f" ({len(event['pending'])} not yet)" if event.get("pending") else ""
    skipped = f"; not set up yet on {', '.join(event['not_set_up'])}" if event.get("not_set_up") else ""
    return done + waited + left + skipped


def group_servers(inv: Inventory, model: str, api: Sequence[tuple[str, int]]) -> list[Server]:
    """The gateway's servers for a group release's API servers ((node, port), from `api_servers`)."""
    return [Server(model, server_name(node, port), node, inv.hosts[node].address, port) for node, port in api]


def group_gateway(
    inv: Inventory, model: str, owner: str, timeout_s: float, access: GatewayAccess, sleep: Any
) -> GroupGateway | None:
    """The gateway's side of one group release, or None when the model is not behind the gateway. Records
    are kept only under an owner line a later run can judge (a lock owner), as a host rollout's are."""
    gateway = inv.gateway
    if gateway is None or model not in gateway.ports:
        return None
    connect = access.connect or ssh_connect(inv)
    control = GatewayControl(gateway, [], connect, timeout_s, sleep=sleep)
    records = None
    if parse_owner(owner) is not None:
        keeper = {model: gateway.hosts[0]}  # as keepers() names it for a model behind the gateway
        records = OutRecords(owner, keeper, access.records or connect, timeout_s)
    return GroupGateway(model, control, records)
