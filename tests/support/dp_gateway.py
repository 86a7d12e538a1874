"""An external data-parallel group behind a gateway for the group-release flow tests: the inventory, a
gateway host answering HAProxy's runtime API (a server UP only while its node's API server runs), a temp-dir
keeper host for the out-of-service records, the gate's health and bench fakes and the options that wire
them to the temp-dir nodes (tests/support/dp_nodes.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dp_inventory import dp_inventory
from gate_flow import bench as smoke
from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthResult
from vllmctl.facts.lock_owner import Owner, format_owner
from vllmctl.gateway.runtime import NOT_SET_UP
from vllmctl.inventory.model import Inventory
from vllmctl.ops import Command
from vllmctl.paths import out_record
from vllmctl.releases.group import group_spec
from vllmctl.runner.core.audit import this_controller
from vllmctl.runner.fleet.hosts import load_model_archs
from vllmctl.runner.multinode.apply_groups import group_plans
from vllmctl.runner.multinode.cluster_release import GroupOutcome, deploy_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_gateway import GatewayAccess
from vllmctl.transport import Result

Load = Callable[[str], Inventory]

NODES = ("gpu-01", "gpu-02")
ADDRESSES = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2"}
URLS = {"gpu-01": "http://10.0.0.11:8000", "gpu-02": "http://10.0.0.12:8000"}
ENGINE = "vllmctl-dsv3-0.service"
REFS = ("dsv3/gpu-01-8000", "dsv3/gpu-02-8000")
CRASH = "--max-num-seqs 99"  # gpu-02's rank dies at start
SICK = "--max-num-seqs 77"  # gpu-02's API server runs but never answers /health; the head's does
HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,type,check_status\n"
INVENTORY = dp_inventory(
    "{size_local: 8, size: 16, balancing: external}",
    hosts="[gpu-01, gpu-02]",
    model_extra="    engine_args: {max_num_seqs: SEQS}\n",
    tail="GATEWAY",
)
GATEWAY = """\
gateway:
  hosts: gpu-03
  models: {dsv3: {port: 9100}}
  check_interval_s: 1
"""


def owner(pid: int) -> str:
    here = this_controller()
    return format_owner(Owner("ops", here.host, pid, "2026-12-03T09:00:00+00:00", here.boot, "apply"))


DEAD_PID = 999_999_999  # beyond any pid_max
ME, DEAD = owner(os.getpid()), owner(DEAD_PID)


def inventory(load: Load, seqs: int = 8, balancing: str = "external", gateway: bool = True) -> Inventory:
    """The group with `balancing`; behind the gateway when external and `gateway`."""
    text = INVENTORY.replace("SEQS", str(seqs)).replace("balancing: external", f"balancing: {balancing}")
    return load(text.replace("GATEWAY", GATEWAY if balancing == "external" and gateway else ""))


class Gateway:
    """HAProxy's runtime API on the gateway host: drain and ready change a server's state, a ready server
    is UP only while its node's engine runs; every command goes to the nodes' order file, and each drain
    notes the record the keeper holds for that server at that moment."""

    def __init__(self, hosts: dict[str, LocalRemote], keeper: LocalRemote, order: Path) -> None:
        self.hosts, self.keeper, self.order = hosts, keeper, order
        self.states = {ref: "UP" for ref in REFS}
        self.claimed: dict[str, str] = {}
        self.sent: list[str] = []

    def execute(self, action: Any, timeout: float) -> Result:
        assert isinstance(action, Command)
        text = action.render()
        self.sent.append(text)
        for ref in REFS:
            for state in ("drain", "ready"):
                if f"{ref} state {state}" in text:
                    with self.order.open("a") as order:
                        order.write(f"gateway {state} {ref}\n")
                    self.states[ref] = state
                    record = self.keeper.local(out_record("dsv3", ref.split("/")[1]))
                    if state == "drain":
                        self.claimed[ref] = record.read_text().strip() if record.exists() else ""
        rows = "".join(f"dsv3,{ref.split('/')[1]},0,0,0,1,,5,{self._status(ref)},2,L7OK\n" for ref in REFS)
        return Result(HEADER + rows, "", 0)

    def _status(self, ref: str) -> str:
        node = ref.split("/")[1].rsplit("-", 1)[0]
        if self.states[ref] == "drain":
            return "DRAIN"
        remote = self.hosts[node]
        unit = remote.local(f"/etc/systemd/system/{ENGINE}")
        api = unit.exists() and "--headless" not in unit.read_text()  # a headless node has no API server
        return "UP" if api and (remote.root / "active" / ENGINE).exists() else "DOWN"

    def close(self) -> None:
        pass


class Keeper(LocalRemote):
    """The first gateway host as the records' keeper, its audit log moved into the temp dir too."""

    def _moved(self, text: str) -> str:
        return super()._moved(text).replace("/var/log/vllmctl", str(self.local("/var/log/vllmctl")))


def health_of(hosts: dict[str, LocalRemote], asked: list[str]) -> Any:
    """Each API server healthy while its node's rank runs (and every rank runs: they form one DP group);
    gpu-02's never when its unit carries SICK."""

    def health(
        url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        asked.append(url)
        ok = all((remote.root / "active" / ENGINE).exists() for remote in hosts.values())
        unit = hosts["gpu-02"].local(f"/etc/systemd/system/{ENGINE}").read_text()
        ok = ok and not (url == URLS["gpu-02"] and SICK in unit)
        return HealthResult(ok, 1.0, 2, "ready" if ok else "health", "" if ok else "connection refused")

    return health


def options(
    hosts: dict[str, LocalRemote],
    gateway: Gateway,
    keeper: Keeper,
    second: int,
    asked: list[str],
    **more: Any,
) -> GroupGateOptions:
    benched: list[str] = more.pop("benched", [])

    def bench(url: str, model: str, api_key: str | None = None) -> Any:
        benched.append(url)
        return smoke(url, model, api_key)

    return GroupGateOptions(
        owner=more.pop("owner", ME),
        created_at=f"2026-12-03T09:00:{second:02d}+00:00",
        health=health_of(hosts, asked),
        bench=bench,
        connect=lambda host: hosts[host.name],
        gateway=GatewayAccess(connect=lambda name: gateway, records=lambda name: keeper),  # type: ignore[arg-type,return-value]
        sleep=lambda seconds: None,
    )


def deploy(inv: Inventory, opts: GroupGateOptions) -> GroupOutcome:
    plans = group_plans(inv, None, *load_model_archs(inv, online=False))
    engine = inv.models["dsv3"].engine
    assert engine is not None
    spec = group_spec(inv, plans["dsv3"], engine, ADDRESSES, start_engine=True)
    return deploy_group(inv, spec, opts, lambda line: None)


def order(tmp_path: Path) -> list[str]:
    return (tmp_path / "order").read_text().splitlines()


def engine_calls(lines: list[str], verbs: tuple[str, ...]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.split()[1] in verbs and ENGINE in line.split()]


def records(keeper: Keeper) -> dict[str, str]:
    found = keeper.local(out_record("dsv3", "x")).parent
    return {p.name: p.read_text().strip() for p in sorted(found.glob("*"))} if found.exists() else {}


def events(outcome: GroupOutcome) -> list[tuple[str, str]]:
    return [(event["host"], event["event"]) for event in outcome.gateway]


BOTH_OUT_AND_BACK = [
    ("gpu-01", "drained"),
    ("gpu-02", "drained"),
    ("gpu-01", "ready"),
    ("gpu-02", "ready"),
]


class NotSetUp(Gateway):
    """A gateway host whose HAProxy a first apply has not set up yet: the runtime API's command says so."""

    def execute(self, action: Any, timeout: float) -> Result:
        self.sent.append(action.render())
        return Result(f"{NOT_SET_UP}\n", "", 0)
