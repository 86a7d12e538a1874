"""How long a host waits for its turn: as long as its model's other replica is out of service in this run
(its own deadlines bound it), `--wait-available` only for a replica nothing in the run brings back, counted
from the moment the peer came back; a stop (SIGTERM, Ctrl-C) makes a waiting host refuse at once, and the
runner then never stops or starts its engines."""

from __future__ import annotations

import threading
import time

from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.releases.rollout import MaxFail, RolloutLedger, ServingReplica, may_take_out
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.runner.releases.rollout import RolloutGuard
from vllmctl.tasks.playbooks import parse_playbook

A = ServingReplica("tiny", "a", "http://10.0.0.1:8000", "http://10.0.0.1:8000", 8000)
B = ServingReplica("tiny", "b", "http://10.0.0.2:8000", "http://10.0.0.2:8000", 8000)
SMALL = ServingReplica("small", "a", "http://10.0.0.1:8001", "http://10.0.0.1:8001", 8001)
SMALL_C = ServingReplica("small", "c", "http://10.0.0.3:8001", "http://10.0.0.3:8001", 8001)
WAIT_S = 0.3


def guard(
    serving: dict[str, bool],
    stop: threading.Event | None = None,
    max_fail: MaxFail | None = None,
    wait_s: float = WAIT_S,
) -> RolloutGuard:
    ledger = RolloutLedger(max_fail or MaxFail(), total=2)
    probe = lambda r: serving[r.host]  # noqa: E731
    rollout = RolloutGuard([A, B], {"tiny": 1}, ledger, None, probe, wait_s, 0.02)
    rollout.stop = stop or threading.Event()
    return rollout


def taking_out(
    rollout: RolloutGuard, host: str, said: list[str] | None = None
) -> tuple[threading.Thread, list[tuple[str, float]]]:
    answer: list[tuple[str, float]] = []
    began = time.monotonic()

    def ask() -> None:
        why = rollout.take_out(host, said.append if said is not None else None)
        answer.append((why, time.monotonic() - began))

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, answer


def test_a_wait_for_hosts_this_run_holds_out_names_them_and_a_short_model_comes_first() -> None:
    decision = may_take_out("a", {"tiny": 1}, [A, B], {A.ref, B.ref}, out={"b"})
    assert (decision.verdict, decision.peers_out) == ("wait", ("b",))
    # a second model short of serving replicas with none of its hosts out: nothing brings them back
    replicas = [A, B, SMALL, SMALL_C]
    decision = may_take_out("a", {"tiny": 1, "small": 1}, replicas, {A.ref, B.ref, SMALL.ref}, out={"b"})
    assert decision.verdict == "wait" and decision.peers_out == ()
    assert decision.reason.startswith("small would be left with 0 serving replica(s)")


def test_a_host_waits_past_wait_available_while_its_peer_is_out_and_goes_once_it_is_back() -> None:
    rollout = guard({"a": True, "b": True})
    assert rollout.take_out("b") == ""
    said: list[str] = []
    thread, answer = taking_out(rollout, "a", said)
    time.sleep(4 * WAIT_S)  # the peer's restart outlasts --wait-available (a big model's load)
    assert answer == [] and thread.is_alive()
    assert said == ["tiny: b is out of service; one of its hosts at a time"]
    assert rollout.put_back("b", "") == ""
    thread.join(5)
    assert answer[0][0] == "" and "a" in rollout.ledger.out


def test_wait_available_counts_from_the_moment_the_peer_came_back_not_serving() -> None:
    serving = {"a": True, "b": True}
    rollout = guard(serving, max_fail=MaxFail(1))
    assert rollout.take_out("b") == ""
    thread, answer = taking_out(rollout, "a")
    time.sleep(2 * WAIT_S)
    serving["b"] = False  # its release failed and its rollback does not serve either
    back = time.monotonic()
    rollout.put_back("b", "release r2: failed")
    thread.join(5)
    why, _ = answer[0]
    assert time.monotonic() - back >= WAIT_S - 0.05  # counted from its last poll while b was out
    assert why == (
        f"held back after waiting {WAIT_S:g} s: tiny would be left with 0 serving replica(s) "
        f"(min_available 1); not serving: {B.ref}"
    )


def test_a_stop_while_a_host_waits_makes_it_refuse_at_once() -> None:
    stop = threading.Event()
    rollout = guard({"a": True, "b": True}, stop, wait_s=30.0)
    assert rollout.take_out("b") == ""
    thread, answer = taking_out(rollout, "a")
    time.sleep(0.1)
    stop.set()
    thread.join(5)
    why, took = answer[0]
    assert why == "interrupted while it waited for its turn" and took < 1.0
    assert rollout.ledger.out == {"b"}
    rollout.put_back("b", "")  # its peer coming back later does not let it go either
    assert rollout.take_out("a") == "interrupted while it waited for its turn"
    assert [e["event"] for e in rollout.host_events("a")] == ["held", "held"]


PLAYBOOK = parse_playbook(
    "name: t\nphases:\n"
    "  - name: models\n    tasks:\n      - task: model_env_files\n      - task: model_units\n"
    "  - name: services\n    tasks:\n      - task: model_services\n",
    "t.yml",
)


def test_the_runner_never_restarts_a_host_stopped_while_it_waits_for_its_turn() -> None:
    inv = inventory(["a", "b"], {"tiny": model("tiny", ("a", "b"))})
    host = FakeHost("a")
    stop = threading.Event()
    rollout = guard({"a": True, "b": True}, stop, wait_s=30.0)
    assert rollout.take_out("b") == ""  # b restarts in this run: a waits for it
    threading.Timer(0.2, stop.set).start()
    opts = RunOptions(guard=rollout, stop=stop)
    began = time.monotonic()
    connect = lambda ctx: FakeRemote(host, [0.0], [])  # noqa: E731
    result = run_playbook(PLAYBOOK, host_contexts(inv, ["a"], {}), connect, opts, time.monotonic)
    assert time.monotonic() - began < 5
    held = result.hosts["a"]
    assert held.status == "skipped" and held.error == (
        "interrupted while it waited for its turn; left on the engines it runs"
    )
    assert not any(c.startswith(("systemctl stop", "systemctl start")) for c in host.executed), host.executed
    rollout.put_back("b", "")
    assert "a" not in rollout.ledger.out
