"""The out-of-service records, pure: their listing reads back as written, each is sorted as this run's,
another live run's or a dead run's, another run's replicas count as out, and a drained server says who holds
it."""

from __future__ import annotations

from vllmctl.releases.out_of_service import (
    OutRecord,
    claims,
    drain_holders,
    held_hosts,
    keepers,
    listing,
    parse_records,
    replica_of,
    sort_records,
)
from vllmctl.releases.rollout import ServingReplica, may_take_out

ME = "ops@ctl pid=10 since=2026-12-01T00:00:00+00:00 boot=b1 cmd=apply"
OTHER = "ops@ctl pid=11 since=2026-12-01T00:00:01+00:00 boot=b1 cmd=apply"
DEAD = "ops@ctl pid=12 since=2026-11-30T00:00:00+00:00 boot=b1 cmd=apply"
REPLICAS = [
    ServingReplica("tiny", "gpu-a", "tiny/gpu-a-8000", "http://a:8000", 8000),
    ServingReplica("tiny", "gpu-b", "tiny/gpu-b-8000", "http://b:8000", 8000),
    ServingReplica("solo", "gpu-b", "http://b:8001", "http://b:8001", 8001),
    ServingReplica("solo", "gpu-c", "http://c:8001", "http://c:8001", 8001),
]


def stale(owner: str) -> bool:
    return owner == DEAD


def test_a_listing_reads_back_as_written_and_skips_lines_vllmctl_did_not_write() -> None:
    records = [OutRecord("tiny", "gpu-a-8000", ME), OutRecord("solo", "gpu-b-8001", OTHER)]
    assert parse_records(listing(records) + "\nstray line\nno/tab\n") == records
    assert records[0].host == "gpu-a" and records[0].ref == "tiny/gpu-a-8000"


def test_records_are_kept_on_the_first_gateway_host_or_the_first_replica_host() -> None:
    assert keepers(REPLICAS, ("gw1", "gw2"), {"tiny"}) == {"tiny": "gw1", "solo": "gpu-b"}
    assert keepers(REPLICAS, (), {}) == {"tiny": "gpu-a", "solo": "gpu-b"}


def test_records_sort_into_mine_another_live_runs_and_a_dead_runs() -> None:
    mine, other, dead = (OutRecord("tiny", "gpu-a-8000", o) for o in (ME, OTHER, DEAD))
    found = sort_records([mine, other, dead], ME, stale)
    assert (found.mine, found.foreign, found.stale) == ((mine,), (other,), (dead,))


def test_a_replica_another_live_run_holds_out_keeps_this_run_from_taking_out_its_peer() -> None:
    """Two runs with different --limit: each guard's own ledger is empty, and a model without a gateway
    still answers /health on the replica about to stop; only the record tells the second run."""
    records = [OutRecord("solo", "gpu-c-8001", OTHER), OutRecord("tiny", "gpu-a-8000", DEAD)]
    foreign = sort_records(records, ME, stale).foreign
    out = held_hosts(foreign, {"solo", "tiny"})
    assert out == {"gpu-c"}  # the dead run's record holds nothing
    serving = {r.ref for r in REPLICAS}
    before = may_take_out("gpu-b", {"solo": 1}, REPLICAS, serving, set())
    assert before.verdict == "go"  # what a run without the records decided
    after = may_take_out("gpu-b", {"solo": 1}, REPLICAS, serving, out)
    assert after.verdict == "wait" and after.reason.startswith("solo: gpu-c is out of service")


def test_a_run_claims_one_record_per_replica_of_the_host() -> None:
    assert claims("gpu-b", {"tiny", "solo"}, REPLICAS, ME) == [
        OutRecord("tiny", "gpu-b-8000", ME),
        OutRecord("solo", "gpu-b-8001", ME),
    ]
    assert replica_of(OutRecord("solo", "gpu-c-8001", DEAD), REPLICAS) == REPLICAS[3]
    assert replica_of(OutRecord("solo", "gone-8001", DEAD), REPLICAS) is None


def test_a_drained_server_says_whether_a_live_run_holds_it() -> None:
    records = [OutRecord("tiny", "gpu-a-8000", OTHER), OutRecord("tiny", "gpu-b-8000", DEAD)]
    statuses = {"tiny/gpu-a-8000": "DRAIN", "tiny/gpu-b-8000": "DRAIN", "tiny/gpu-c-8000": "MAINT"}
    statuses["tiny/gpu-d-8000"] = "UP"
    holders = drain_holders(statuses, records, stale)
    assert set(holders) == {"tiny/gpu-a-8000", "tiny/gpu-b-8000", "tiny/gpu-c-8000"}
    assert holders["tiny/gpu-a-8000"].held and not holders["tiny/gpu-b-8000"].held
    assert holders["tiny/gpu-b-8000"].to_json() == {"held_by": DEAD, "run_gone": True, "orphan": True}
    assert holders["tiny/gpu-c-8000"].to_json() == {"held_by": None, "run_gone": False, "orphan": True}
    assert "its run died" in holders["tiny/gpu-b-8000"].describe()
    assert holders["tiny/gpu-c-8000"].describe() == "no run holds it (drained by hand?)"
