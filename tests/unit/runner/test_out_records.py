"""Out-of-service records in a real shell on a temp-dir keeper host: a run's records make a second run
(another process, another --limit) wait for the replica the first holds out, a claim loses to one made
since its read, and a dead run's drain is put back by the next run (ready, UP, record gone, audit line)
while a drain no run recorded is left alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from local_remote import LocalRemote

from vllmctl.facts.lock_owner import Owner, format_owner
from vllmctl.gateway.config import Server
from vllmctl.inventory.model import GatewaySpec
from vllmctl.ops import Command
from vllmctl.paths import AUDIT_LOG, out_record
from vllmctl.releases.out_of_service import OutRecord
from vllmctl.releases.rollout import MaxFail, RolloutLedger, ServingReplica
from vllmctl.runner.core.audit import this_controller
from vllmctl.runner.gateway.control import GatewayControl
from vllmctl.runner.gateway.out_records import OutRecords
from vllmctl.runner.releases.orphans import heal_lines, heal_orphans
from vllmctl.runner.releases.rollout import RolloutGuard, rollout_guard
from vllmctl.transport import Result

HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,type,check_status\n"
HOSTS = ("a", "b", "c")
REPLICAS = [ServingReplica("tiny", h, f"tiny/{h}-8000", f"http://{h}:8000", 8000) for h in HOSTS[:2]]
SERVERS = [Server("tiny", f"{h}-8000", h, f"10.0.0.{i}", 8000) for i, h in enumerate(HOSTS[:2], 1)]


def owner(pid: int, command: str = "apply") -> str:
    here = this_controller()
    return format_owner(Owner("ops", here.host, pid, "2026-12-01T00:00:00+00:00", here.boot, command))


DEAD_PID = 999_999_999  # beyond any pid_max
ME, OTHER, DEAD = owner(100), owner(101), owner(DEAD_PID)


def alive(pid: int) -> bool:
    return pid != DEAD_PID


class StatGateway:
    """A gateway host whose servers' states the test sets; drain/ready commands change them like HAProxy."""

    def __init__(self, **states: str) -> None:
        self.states, self.sent = states, []

    def execute(self, action: Any, timeout: float) -> Result:
        assert isinstance(action, Command)
        text = action.render()
        self.sent.append(text)
        for host in self.states:
            for state, status in (("drain", "DRAIN"), ("ready", "UP")):
                if f"tiny/{host}-8000 state {state}" in text:
                    self.states[host] = status
        rows = "".join(f"tiny,{h}-8000,0,0,0,1,,5,{s},2,L7OK\n" for h, s in self.states.items())
        return Result(HEADER + rows, "", 0)

    def close(self) -> None:
        pass


class Keeper(LocalRemote):
    """The temp-dir host, its audit log moved too."""

    def _moved(self, text: str) -> str:
        return super()._moved(text).replace("/var/log/vllmctl", str(self.local("/var/log/vllmctl")))


def records(keeper: Keeper, me: str) -> OutRecords:
    return OutRecords(me, {"tiny": keeper.name}, lambda name: keeper, alive=alive)


def guard(keeper: Keeper, me: str, gateway: Any = None, probe: Any = None) -> RolloutGuard:
    control = None
    if gateway is not None:
        spec = GatewaySpec(("gw",), {"tiny": 9100}, drain_timeout_s=1.0, check_interval_s=0.01)
        control = GatewayControl(spec, SERVERS, lambda name: gateway, sleep=lambda s: None)
    return RolloutGuard(
        REPLICAS,
        {"tiny": 1},
        RolloutLedger(MaxFail(), total=1),
        control,
        probe or (lambda r: True),
        wait_s=0.3,
        poll_s=0.02,
        records=records(keeper, me),
    )


def recorded(keeper: Keeper) -> dict[str, str]:
    found = keeper.local(out_record("tiny", "x")).parent
    return {p.name: p.read_text().strip() for p in sorted(found.glob("*"))} if found.exists() else {}


def test_a_second_run_waits_while_another_live_run_holds_a_replica_of_its_model_out(tmp_path: Path) -> None:
    """No gateway: the replica the first run holds out still answers /health until its engine stops, and
    each run's own ledger is empty of the other's hosts; only the record tells."""
    keeper = Keeper(tmp_path, "a")
    first, second = guard(keeper, ME), guard(keeper, OTHER)
    assert first.take_out("a") == ""
    assert recorded(keeper) == {"a-8000": ME}
    assert second.take_out("b") == (
        "held back after waiting 0.3 s: tiny: a is out of service; one of its hosts at a time"
    )
    assert first.put_back("a", "") == ""
    assert recorded(keeper) == {}
    assert second.take_out("b") == ""
    assert recorded(keeper) == {"b-8000": OTHER}


def test_a_claim_loses_to_a_claim_made_since_its_read(tmp_path: Path) -> None:
    keeper = Keeper(tmp_path, "a")
    mine, theirs = records(keeper, ME), records(keeper, OTHER)
    seen = mine.read({"tiny"})
    assert seen == []
    assert theirs.claim([OutRecord("tiny", "b-8000", OTHER)], theirs.read({"tiny"}))
    assert not mine.claim([OutRecord("tiny", "a-8000", ME)], seen)
    assert recorded(keeper) == {"b-8000": OTHER}  # nothing of the losing claim was written
    assert mine.claim([OutRecord("tiny", "a-8000", ME)], mine.read({"tiny"}))
    assert recorded(keeper) == {"a-8000": ME, "b-8000": OTHER}


def test_a_dead_runs_drain_is_put_back_and_a_drain_no_run_recorded_is_left(tmp_path: Path) -> None:
    keeper = Keeper(tmp_path, "gw")
    gw = StatGateway(a="DRAIN", b="UP", c="DRAIN")  # c: drained by a person with the runtime API
    path = keeper.local(out_record("tiny", "a-8000"))
    path.parent.mkdir(parents=True)
    path.write_text(DEAD + "\n")
    report = heal_orphans(guard(keeper, ME, gw))
    assert report == [{"model": "tiny", "server": "a-8000", "owner": DEAD, "event": "healed"}]
    assert gw.states == {"a": "UP", "b": "UP", "c": "DRAIN"}
    assert not any("c-8000" in sent for sent in gw.sent)
    assert recorded(keeper) == {}
    (line,) = keeper.local(AUDIT_LOG).read_text().splitlines()
    audit = json.loads(line)
    assert (audit["by"], audit["owner"], audit["server"]) == (ME, DEAD, "a-8000")
    assert heal_lines(report) == [f"tiny/a-8000: left out of service by a run that died ({DEAD}): put back"]


def test_a_dead_runs_drain_waits_for_its_engine_and_a_live_runs_is_not_touched(tmp_path: Path) -> None:
    keeper = Keeper(tmp_path, "gw")
    gw = StatGateway(a="DRAIN", b="DRAIN")
    for server, who in (("a-8000", DEAD), ("b-8000", OTHER)):
        path = keeper.local(out_record("tiny", server))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(who + "\n")
    report = heal_orphans(guard(keeper, ME, gw, probe=lambda r: False))
    assert [(e["server"], e["event"]) for e in report] == [("a-8000", "left")]
    assert "does not serve yet" in report[0]["reason"]
    assert gw.states == {"a": "DRAIN", "b": "DRAIN"}
    assert recorded(keeper) == {"a-8000": DEAD, "b-8000": OTHER}


class StuckGateway(StatGateway):
    """A gateway whose server never comes UP after `set state ready` (its checks fail)."""

    def execute(self, action: Any, timeout: float) -> Result:
        text = action.render()
        if "state ready" in text:
            self.sent.append(text)
            text = "show stat"
        return super().execute(Command(shell=text), timeout)


def test_put_back_removes_the_record_once_ready_and_keeps_it_when_the_server_did_not_come_up(
    tmp_path: Path,
) -> None:
    keeper = Keeper(tmp_path, "gw")
    ok = guard(keeper, ME, StatGateway(a="UP", b="UP"))
    assert ok.take_out("a") == "" and recorded(keeper) == {"a-8000": ME}
    assert ok.put_back("a", "") == "" and recorded(keeper) == {}

    stuck = StuckGateway(a="UP", b="UP")
    kept = guard(keeper, ME, stuck)
    ticks = iter(range(0, 10_000, 5))
    assert kept.gateway is not None
    kept.gateway.clock = lambda: float(next(ticks))
    assert kept.take_out("a") == ""
    assert kept.put_back("a", "").startswith("a: its release passed, but the gateway did not see it UP")
    assert recorded(keeper) == {"a-8000": ME}  # once this run is gone, the next one puts it back


def test_only_an_owner_line_a_later_run_can_judge_keeps_records() -> None:
    from executor_builders import inventory, model

    inv = inventory(["a", "b"], {"tiny": model("tiny", ("a", "b"), port=8000)})
    assert rollout_guard(inv, {}, 2, MaxFail(), None, owner="vllmctl").records is None
    found = rollout_guard(inv, {}, 2, MaxFail(), None, owner=ME).records
    assert found is not None and found.owner == ME and found.keeper == {"tiny": "a"}
