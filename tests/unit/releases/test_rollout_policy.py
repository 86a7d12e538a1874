"""The rollout policy on plain data: --max-fail counting, and whether a host may stop its engines given who
serves (min_available per model, one host of a model out at a time, a lone replica, a broken replica)."""

from __future__ import annotations

import pytest

from vllmctl.releases.rollout import MaxFail, RolloutLedger, ServingReplica, may_take_out

A, B, C = (ServingReplica("tiny", h, f"tiny/{h}-8000") for h in "abc")
OTHER = ServingReplica("big", "b", "big/b-9000")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("0", MaxFail(0)), ("2", MaxFail(2)), ("10%", MaxFail(0, 10.0)), (" 100% ", MaxFail(0, 100.0))],
)
def test_max_fail_reads_a_count_or_a_percentage(text: str, parsed: MaxFail) -> None:
    assert MaxFail.parse(text) == parsed


@pytest.mark.parametrize("text", ["", "x", "-1", "1.5", "150%", "%"])
def test_max_fail_refuses_anything_else_and_says_what_it_takes(text: str) -> None:
    with pytest.raises(ValueError, match="--max-fail"):
        MaxFail.parse(text)


def test_max_fail_is_exceeded_past_its_count_or_share() -> None:
    assert not MaxFail().exceeded(0, 4) and MaxFail().exceeded(1, 4)
    assert not MaxFail(2).exceeded(2, 4) and MaxFail(2).exceeded(3, 4)
    assert not MaxFail(0, 25.0).exceeded(1, 4) and MaxFail(0, 25.0).exceeded(2, 4)
    assert MaxFail(0, 0.0).exceeded(1, 100) and not MaxFail(0, 0.0).exceeded(0, 100)


def test_the_ledger_says_why_the_rollout_stopped_once_past_max_fail() -> None:
    ledger = RolloutLedger(MaxFail(1), total=4)
    ledger.fail("a", "release r2: rolled_back")
    assert ledger.stopped == ""
    ledger.fail("group g", "failed")
    ledger.fail("a", "counted once")
    assert ledger.stopped == "the rollout stopped: 2 failed (a, group g), more than --max-fail 1"
    assert ledger.failed["a"] == "release r2: rolled_back"


def test_a_host_goes_when_another_replica_serves() -> None:
    decision = may_take_out("a", {"tiny": 1}, [A, B], {A.ref, B.ref}, out=set())
    assert decision.verdict == "go" and decision.notes == ()


def test_a_serving_host_waits_while_the_other_replica_does_not_serve() -> None:
    decision = may_take_out("a", {"tiny": 1}, [A, B], {A.ref}, out=set())
    assert decision.verdict == "wait"
    assert decision.reason == (
        "tiny would be left with 0 serving replica(s) (min_available 1); not serving: tiny/b-8000"
    )


def test_a_host_that_does_not_serve_takes_nothing_away_and_goes() -> None:
    # a first deploy, or a broken replica being fixed, while the other one is down too or already out
    assert may_take_out("a", {"tiny": 1}, [A, B], set(), out=set()).verdict == "go"
    assert may_take_out("a", {"tiny": 1}, [A, B], set(), out={"b"}).verdict == "go"


def test_one_host_of_a_model_at_a_time_even_when_enough_would_serve() -> None:
    decision = may_take_out("c", {"tiny": 1}, [A, B, C], {B.ref, C.ref}, out={"a"})
    assert (decision.verdict, decision.reason) == (
        "wait",
        "tiny: a is out of service; one of its hosts at a time",
    )
    # hosts of other models do not hold it back
    assert may_take_out("c", {"tiny": 1}, [A, B, C, OTHER], {A.ref, C.ref}, out={"b"}).verdict == "wait"
    assert may_take_out("a", {"tiny": 1}, [A, C, OTHER], {A.ref, C.ref}, out={"b"}).verdict == "go"


def test_a_model_served_by_one_host_only_restarts_and_the_report_says_so() -> None:
    decision = may_take_out("b", {"big": 1}, [A, OTHER], {OTHER.ref}, out=set())
    assert decision.verdict == "go"
    assert decision.notes == ("big is served only by b: it does not serve while b restarts",)
    assert may_take_out("b", {"big": 1}, [A, OTHER], set(), out=set()).notes == ()  # it did not serve


def test_min_available_counts_the_other_replicas_that_serve() -> None:
    three = [A, B, C]
    assert may_take_out("a", {"tiny": 2}, three, {A.ref, B.ref}, out=set()).verdict == "wait"
    assert may_take_out("a", {"tiny": 2}, three, {A.ref, B.ref, C.ref}, out=set()).verdict == "go"
    assert may_take_out("a", {"tiny": 0}, three, {A.ref}, out=set()).verdict == "go"


def test_min_available_0_lets_every_host_of_the_model_go_at_once() -> None:
    decision = may_take_out("c", {"tiny": 0}, [A, B, C], {C.ref}, out={"a", "b"})
    assert (decision.verdict, decision.notes) == ("go", ())
    assert may_take_out("c", {"tiny": 1}, [A, B, C], {C.ref}, out={"a", "b"}).verdict == "wait"


def test_enough_serving_replicas_stop_the_asking() -> None:
    asked: list[str] = []

    class Lazy:
        def __contains__(self, ref: object) -> bool:
            asked.append(str(ref))
            return True

    assert may_take_out("a", {"tiny": 1}, [A, B, C], Lazy(), out=set()).verdict == "go"
    assert asked == [A.ref, B.ref]  # C was never asked: B was enough


def test_max_out_lets_that_many_hosts_of_a_model_be_out_and_counts_no_replica_out() -> None:
    replicas = [A, B, C]
    serving = {A.ref, B.ref, C.ref}
    decision = may_take_out("a", {"tiny": 1}, replicas, serving, out={"b"}, max_out={"tiny": 2})
    assert decision.verdict == "go" and decision.counted == ("tiny",)
    # b is out (its engine may still answer): only c counts, and min_available 2 is not met
    short = may_take_out("a", {"tiny": 2}, replicas, serving, out={"b"}, max_out={"tiny": 2})
    assert short.verdict == "wait" and "left with 1 serving replica(s) (min_available 2)" in short.reason
    full = may_take_out("a", {"tiny": 1}, replicas, serving, out={"b", "c"}, max_out={"tiny": 2})
    assert full.reason == "tiny: b, c are out of service; 2 of its hosts at a time (max_unavailable)"
    assert full.peers_out == ("b", "c")


def test_min_available_0_with_every_host_as_its_bound_asks_nothing() -> None:
    decision = may_take_out("a", {"tiny": 0}, [A, B], set(), out={"b"}, max_out={"tiny": 2})
    assert decision.verdict == "go" and decision.counted == ()
