"""The gateway's side of a rollout: before a host's engines stop, its servers are set to drain on every
gateway host and the run waits (bounded) for their requests to finish; after its release is decided they are
set ready and the run waits for HAProxy's checks to see them up. Which host may go is decided by
runner/releases/rollout.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.errors import InputError, VllmctlError
from vllmctl.gateway.config import Server, servers
from vllmctl.gateway.runtime import NOT_SET_UP, SHOW_STAT, ServerStat, parse_stat, set_state
from vllmctl.inventory.model import GatewaySpec, Inventory
from vllmctl.multinode.plan import plan_cluster
from vllmctl.ops import Command
from vllmctl.planner.inventory_plan import GpuFacts
from vllmctl.planner.rules.base import HostResources
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.fleet.hosts import deployment_plans
from vllmctl.tasks.desired import ModelPlan, Replica
from vllmctl.tasks.gateway import TLS_SECRET

UP_WAIT_MIN_S = 30.0  # a replica set ready needs `rise` good checks before HAProxy sends it requests
POLL_S = 0.5
READY_AGAIN_S = 5.0  # how long `ready` waits for UP before saying `set state ready` again


class GatewayNotSetUp(VllmctlError):
    """vllmctl has not set HAProxy up on that gateway host yet: it routes nothing, so there is nothing to
    drain or ready there; its config, once written, lists every server."""


@dataclass
class GatewayControl:
    """Drains and readies a host's servers on every gateway host; `events` records each drain and ready
    with its wall-clock time, for the JSON report and the lab test's order check."""

    gateway: GatewaySpec
    servers: list[Server]
    connect: Callable[[str], Remote]  # a gateway host's name -> its connection
    command_timeout_s: float = 30.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    events: list[dict[str, Any]] = field(default_factory=list)
    # rollback knows only each model's first replica port: the gateway's own `show stat` lists the rest
    discover: bool = False
    # multi-node models' backends: a host's drain leaves them, their group release drains every node at once
    groups: frozenset[str] = frozenset()
    _remotes: dict[str, Remote] = field(default_factory=dict)
    # the rollout asks `show stat` from one host's thread while another host's drain runs: one command at a
    # time on each gateway connection
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _listed: dict[str, list[str]] | None = None

    def _refs(self, host: str) -> list[str]:
        refs = [s.ref for s in self.servers if s.host == host]
        if self.discover:
            refs += [ref for ref in self._listed_refs().get(host, []) if ref not in refs]
        return [ref for ref in refs if ref.split("/", 1)[0] not in self.groups]

    def _listed_refs(self) -> dict[str, list[str]]:
        """host -> the servers the gateways route to it (named `HOST-PORT` in a model's backend)."""
        if self._listed is None:
            hosts = {s.host for s in self.servers}
            self._listed = {}
            for gw in self.gateway.hosts:
                try:
                    rows = self.stats(gw).values()
                except VllmctlError:
                    continue  # drain() records the unreachable gateway itself
                for row in rows:
                    for host in hosts:
                        port = row.name.removeprefix(f"{host}-")
                        if row.backend in self.gateway.ports and port != row.name and port.isdigit():
                            self._listed.setdefault(host, []).append(row.ref)
        return self._listed

    def _run(self, gateway_host: str, command: Command) -> str:
        with self._mutex:
            if gateway_host not in self._remotes:
                self._remotes[gateway_host] = self.connect(gateway_host)
            result = self._remotes[gateway_host].execute(command, self.command_timeout_s)
        if not result.ok:
            raise VllmctlError(
                f"gateway {gateway_host}: the runtime API failed: {(result.stderr or result.stdout)[-300:]}",
                "is haproxy running there? `systemctl status haproxy` on the gateway host",
            )
        if result.stdout.strip() == NOT_SET_UP:
            raise GatewayNotSetUp(f"gateway {gateway_host}: HAProxy is not set up there yet")
        return result.stdout

    def stats(self, gateway_host: str) -> dict[str, ServerStat]:
        return parse_stat(self._run(gateway_host, SHOW_STAT))

    def up_refs(self) -> set[str]:
        """The servers UP on every gateway host (raises when a gateway host does not answer)."""
        seen = [self.stats(gw) for gw in self.gateway.hosts]
        listed = set().union(*seen) if seen else set()
        return {ref for ref in listed if all(ref in s and s[ref].status.startswith("UP") for s in seen)}

    def _wait(
        self,
        refs: list[str],
        done: Callable[[ServerStat], bool],
        limit_s: float,
        gateways: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """Poll `gateways` (every gateway host by default) until `done` holds for each of `refs` (a server
        one lacks counts done)."""
        started = self.clock()
        while True:
            seen = {gw: self.stats(gw) for gw in (self.gateway.hosts if gateways is None else gateways)}
            pending = {
                f"{gw}:{ref}": stat[ref].to_json()
                for gw, stat in seen.items()
                for ref in refs
                if ref in stat and not done(stat[ref])
            }
            waited = self.clock() - started
            if not pending or waited >= limit_s:
                return {"waited_s": round(waited, 2), "pending": pending}
            self.sleep(POLL_S)

    def _say(self, refs: list[str], state: str, skip: list[str]) -> dict[str, str]:
        """Set `refs` to `state` on each gateway host not in `skip`: each one's answer; a host HAProxy is not
        set up on yet is added to `skip` (it routes nothing)."""
        answers = {}
        for gw in self.gateway.hosts:
            if gw in skip:
                continue
            try:
                answers[gw] = self._run(gw, set_state(refs, state)).strip()
            except GatewayNotSetUp:
                skip.append(gw)
        return answers

    def drain(self, host: str) -> None:
        """A gateway that cannot be reached (not set up yet, down) does not stop the rollout: it serves
        nothing then; the failure is recorded in the host's events."""
        refs = self._refs(host)
        if not refs:
            return
        event: dict[str, Any] = {"host": host, "servers": refs}
        try:
            not_set_up: list[str] = []
            answers = self._say(refs, "drain", not_set_up)
            event["answers"] = {gw: answer for gw, answer in answers.items() if answer}
            idle = self._wait(refs, _idle, self.gateway.drain_timeout_s, tuple(answers))
            event.update({"event": "drained", **idle, **({"not_set_up": not_set_up} if not_set_up else {})})
        except VllmctlError as exc:
            event.update({"event": "drain failed", "error": exc.message})
        self.events.append({**event, "time": self.clock()})

    def ready(self, host: str) -> bool:
        """Set ready and wait (bounded) for UP: True when every server came up (or the host has none); a
        gateway host HAProxy is not set up on yet is passed over (named in the event): it routes nothing."""
        return self.ready_servers(host, self._refs(host))

    def ready_servers(self, host: str, refs: list[str], wait: bool = True) -> bool:
        """`ready` for these servers of `host` only; without `wait`, set ready on every gateway host and not
        waited for (an engine that serves none of them: HAProxy's checks keep them out)."""
        if not refs:
            return True
        event: dict[str, Any] = {"host": host, "servers": refs}
        try:
            limit = max(UP_WAIT_MIN_S, 10 * self.gateway.check_interval_s)
            started = self.clock()
            not_set_up: list[str] = []
            while True:
                # said again each round: a gateway whose config this run changed reloads, and the new
                # HAProxy takes the server's saved state (drain, from before its host's restart) with it
                routing = tuple(self._say(refs, "ready", not_set_up))
                if not wait:
                    waited: dict[str, Any] = {"pending": {}}
                    break
                left = limit - (self.clock() - started)
                waited = self._wait(refs, _up, min(left, READY_AGAIN_S), routing)
                if not waited["pending"] or self.clock() - started >= limit:
                    break
            if not_set_up:
                event["not_set_up"] = not_set_up
            event.update({"event": "ready", **waited, "waited_s": round(self.clock() - started, 2)})
            return not event["pending"]
        except VllmctlError as exc:
            event.update({"event": "ready failed", "error": exc.message})
            return False
        finally:
            self.events.append({**event, "time": self.clock()})

    def host_events(self, host: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["host"] == host]

    def close(self) -> None:
        for remote in self._remotes.values():
            remote.close()
        self._remotes.clear()


def _idle(stat: ServerStat) -> bool:
    return stat.sessions == 0 and stat.queued == 0


def _up(stat: ServerStat) -> bool:
    return stat.status.startswith("UP")


def ssh_gateway(
    inventory: Inventory, servers: list[Server], timeout_s: float, discover: bool = False
) -> GatewayControl | None:
    """The gateway's control over SSH, or None when the inventory has no gateway; `discover` adds the servers
    the gateways list for a host to those given."""
    from vllmctl.runner.core.remote import SshRemote  # the edge: only a run that changes hosts connects
    from vllmctl.transport import SshTransport

    if inventory.gateway is None:
        return None

    def connect(name: str) -> Remote:
        return SshRemote(SshTransport(inventory.hosts[name]))

    groups = frozenset(m for m in inventory.gateway.ports if inventory.models[m].cluster is not None)
    return GatewayControl(inventory.gateway, servers, connect, timeout_s, discover=discover, groups=groups)


def gateway_view(inventory: Inventory, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Per gateway host, what HAProxy says of each server (`servers`), or why it could not say (`error`)."""
    guard = ssh_gateway(inventory, [], timeout_s)
    if guard is None:
        return {}
    view: dict[str, dict[str, Any]] = {}
    try:
        for host in guard.gateway.hosts:
            try:
                view[host] = {"servers": {ref: s.to_json() for ref, s in guard.stats(host).items()}}
            except VllmctlError as exc:
                view[host] = {"error": exc.message}
    finally:
        guard.close()
    return view


def fleet_servers(inventory: Inventory, plans: Mapping[str, Mapping[str, ModelPlan]]) -> list[Server]:
    """Every server behind the gateway, from the plans of the hosts that serve its models."""

    def ports(host: str, model: Any) -> tuple[int, ...]:
        plan = plans.get(host, {}).get(model.name)
        replicas = plan.replicas if plan else (Replica(0, model.port),)
        return tuple(replica.port for replica in replicas)

    return servers(inventory, ports)


def gateway_plans(
    inventory: Inventory,
    hosts: list[str],
    plans: dict[str, dict[str, ModelPlan]],
    gpus: Mapping[str, GpuFacts],
    archs: Mapping[str, ModelArch],
    resources: Mapping[str, HostResources],
) -> dict[str, dict[str, ModelPlan]]:
    """The plans of every host behind the gateway, also those --limit left out: its config lists them all; a
    multi-node model's from its group's plan."""
    if inventory.gateway is None:
        return {}
    models = [inventory.models[name] for name in inventory.gateway.ports]
    behind = {h for model in models if model.cluster is None for h in model.hosts}
    found = plans
    if not behind <= set(hosts):
        found = deployment_plans(inventory, sorted(behind), gpus, archs=archs, resources=resources)
    grouped: dict[str, dict[str, ModelPlan]] = {host: dict(wanted) for host, wanted in found.items()}
    for model in models:
        if model.cluster is None:
            continue
        # one server per node that runs an API server (every used node in vLLM's hybrid and external DP
        # modes); the group's spare hosts serve nothing
        api = plan_cluster(inventory, model, model.cluster, gpus, archs.get(model.source)).api_hosts
        for host in model.hosts:
            replicas = (Replica(0, model.port),) if host in api else ()
            grouped.setdefault(host, {})[model.name] = ModelPlan(dict(model.engine_args), replicas)
    return grouped


def gateway_secrets(inventory: Inventory) -> dict[str, str]:
    """The gateway's TLS bundle (certificate, then key) read on the controller, under a name no secret has."""
    tls = inventory.gateway.tls if inventory.gateway else None
    if tls is None:
        return {}
    try:
        texts = [Path(path).expanduser().read_text() for path in (tls.cert, tls.key)]
    except OSError as exc:
        raise InputError(f"gateway.tls: cannot read {exc.filename}: {exc.strerror}", "fix the path") from exc
    return {TLS_SECRET: "".join(text if text.endswith("\n") else text + "\n" for text in texts)}
