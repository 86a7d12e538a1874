"""`plan --from-status`'s pure core: per-process advice and measured figures in, one engine_args change per
model out, with its evidence, as a unified diff and as the changed inventory text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmctl.inventory import load_inventory
from vllmctl.status.advice import Advice, advise
from vllmctl.status.metrics import EngineMetrics, parse_metrics
from vllmctl.status.model import ModelStatus
from vllmctl.status.proposals import (
    Proposal,
    changed_inventory,
    engine_args_diff,
    merge_changes,
    propose,
    propose_all,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu"


def metrics(running: float = 2, waiting: float = 3, kv: float | None = 0.2) -> EngineMetrics:
    return EngineMetrics("vllm", "m", requests_running=running, requests_waiting=waiting, kv_usage=kv)


def status(
    host: str,
    *advice: Advice,
    model: str = "m",
    m: EngineMetrics | None = None,
    kv_tokens: int | None = None,
    error: str = "",
) -> ModelStatus:
    measured = m if m is not None or error else metrics()
    return ModelStatus(
        host,
        model,
        8000,
        "active",
        "r1",
        True,
        measured,
        None,
        advice,
        measured_kv_tokens=kv_tokens,
        error=error,
    )


def raise_seqs(to: int) -> Advice:
    return Advice("max-num-seqs-too-low", "the batch is full", {"waiting_max": 3.0}, {"max_num_seqs": to})


def preempting(**change: Any) -> Advice:
    return Advice("frequent-preemption", "vLLM preempts", {"preemptions_per_s": 2.0}, change)


LOAD_BOUND = Advice("load-bound", "the load limits throughput; no change", {"waiting_max": 0.0})


def test_a_full_batch_with_a_queue_raises_max_num_seqs_with_its_evidence() -> None:
    proposal = propose("m", {"max_num_seqs": 2}, [status("a", raise_seqs(4), kv_tokens=1000)])
    assert proposal.changes == {"max_num_seqs": 4}
    assert proposal.proposed == {"max_num_seqs": 4}
    assert proposal.reason.startswith("max-num-seqs-too-low on a/m:8000: the batch is full")
    (finding,) = proposal.findings
    # the measured KV size and what one running sequence holds of it (0.2 x 1000 / 2) join the evidence
    assert finding.evidence == {"waiting_max": 3.0, "kv_tokens": 1000.0, "kv_tokens_per_running_seq": 100.0}


def test_a_queue_that_never_forms_changes_nothing() -> None:
    proposal = propose("m", {"max_num_seqs": 2}, [status("a", LOAD_BOUND)])
    assert proposal.changes == {} and proposal.proposed == {"max_num_seqs": 2}
    assert (
        proposal.reason
        == "load-bound on a/m:8000: the load limits throughput; no change (no engine_args change)"
    )
    assert engine_args_diff(proposal, "inv.yml") == ""


def test_preemption_anywhere_outranks_headroom_elsewhere() -> None:
    statuses = [
        status("a", raise_seqs(8)),
        status("b", preempting(gpu_memory_utilization=0.95)),
        status("c", LOAD_BOUND),
    ]
    proposal = propose("m", {"max_num_seqs": 4}, statuses)
    assert proposal.changes == {"gpu_memory_utilization": 0.95}
    assert proposal.reason.startswith("frequent-preemption on b/m:8000")
    assert [f.where for f in proposal.findings] == ["a/m:8000", "b/m:8000", "c/m:8000"]


SEQS, CONS, MEM, TP = (
    "max_num_seqs",
    "schedule_conservativeness",
    "gpu_memory_utilization",
    "tensor_parallel_size",
)


@pytest.mark.parametrize(
    ("code", "current", "suggested", "expected"),
    [
        ("max-num-seqs-too-low", {SEQS: 2}, [{SEQS: 8}, {SEQS: 4}], {SEQS: 4}),
        ("frequent-preemption", {SEQS: 64}, [{SEQS: 24}, {SEQS: 48}], {SEQS: 48}),
        # unset: the direction comes from the advice; the smallest step that way
        ("frequent-preemption", {}, [{SEQS: 24}, {SEQS: 48}], {SEQS: 48}),
        ("max-num-seqs-too-low", {}, [{SEQS: 8}, {SEQS: 4}], {SEQS: 4}),
        ("scheduler-too-conservative", {}, [{CONS: 0.5}, {CONS: 0.7}], {CONS: 0.7}),
        ("kv-cache-full", {}, [{MEM: 0.95}, {TP: 2}], {MEM: 0.95, TP: 2}),
        # a suggestion equal to what is set is no change
        ("max-num-seqs-too-low", {SEQS: 4}, [{SEQS: 4}], {}),
        ("load-bound", {SEQS: 4}, [{}], {}),
    ],
)
def test_processes_that_disagree_get_the_smallest_step(
    code: str, current: dict[str, Any], suggested: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    assert merge_changes(code, suggested, current) == expected


def test_no_metrics_anywhere_decides_nothing_and_says_where() -> None:
    proposal = propose(
        "m", {}, [status("a", error="unreachable: timed out"), status("b", error="ConnectError")]
    )
    assert proposal.changes == {} and proposal.findings == ()
    assert proposal.reason == "no process answered with metrics: nothing to decide from"
    assert proposal.unmeasured == ("a/m:8000: unreachable: timed out", "b/m:8000: ConnectError")


def test_a_healthy_fleet_without_advice_keeps_its_args_and_notes_the_silent_process() -> None:
    proposal = propose("m", {"max_num_seqs": 2}, [status("a"), status("b", error="ConnectError")])
    assert proposal.changes == {}
    assert proposal.reason.startswith("no advice")
    assert proposal.unmeasured == ("b/m:8000: ConnectError",)


def test_other_models_statuses_are_not_evidence() -> None:
    proposal = propose("m", {"max_num_seqs": 2}, [status("a", raise_seqs(4), model="other")])
    assert proposal.changes == {} and proposal.findings == ()


def test_evidence_without_a_kv_size_or_running_requests_stays_as_advised() -> None:
    idle = status("a", LOAD_BOUND, m=metrics(running=0, waiting=0, kv=0.0), kv_tokens=500)
    (finding,) = propose("m", {}, [idle]).findings
    assert finding.evidence == {"waiting_max": 0.0, "kv_tokens": 500.0}
    (plain,) = propose("m", {}, [status("a", LOAD_BOUND)]).findings
    assert plain.evidence == {"waiting_max": 0.0}


def test_from_real_vllm_metrics_to_a_proposal() -> None:
    queueing = next(iter(parse_metrics((FIXTURES / "metrics_queueing.txt").read_text()).values()))
    advice = tuple(advise("vllm", {"max_num_seqs": 2}, [queueing, queueing], None, on_cpu=True))
    proposal = propose("m", {"max_num_seqs": 2}, [status("a", *advice, m=queueing, kv_tokens=1_048_576)])
    assert proposal.changes["max_num_seqs"] > 2
    assert proposal.findings[0].evidence["waiting_max"] == queueing.requests_waiting > 0


def test_the_diff_shows_only_the_models_engine_args() -> None:
    proposal = Proposal("m", {"max_num_seqs": 2, "enforce_eager": True}, {"max_num_seqs": 4}, "why")
    assert engine_args_diff(proposal, "inv.yml") == (
        "--- a/inv.yml:models.m.engine_args\n"
        "+++ b/inv.yml:models.m.engine_args\n"
        "@@ -1,3 +1,3 @@\n"
        " engine_args:\n"
        "   enforce_eager: true\n"
        "-  max_num_seqs: 2\n"
        "+  max_num_seqs: 4\n"
    )


def test_propose_all_covers_each_model_in_order() -> None:
    proposals = propose_all({"z": {}, "m": {"max_num_seqs": 2}}, [status("a", raise_seqs(4))])
    assert [p.model for p in proposals] == ["m", "z"]
    assert proposals[0].to_json()["changes"] == {"max_num_seqs": 4}
    assert proposals[1].to_json()["reason"].startswith("no process answered")


def test_the_changed_inventory_validates_and_differs_only_in_engine_args(tmp_path: Path) -> None:
    original = (
        "vllmctl: 1\n"
        "hosts:\n  a: {address: 10.0.0.1}\n"
        "models:\n"
        "  m: {source: /srv/m, hosts: [a], engine_args: {max_num_seqs: 2}}\n"
        "  n: {source: /srv/n, hosts: [a], port: 8001}\n"
    )
    proposals = [
        Proposal("m", {"max_num_seqs": 2}, {"max_num_seqs": 4}, "why"),
        Proposal("n", {}, {}, "no advice"),
    ]
    written = tmp_path / "new.yml"
    written.write_text(changed_inventory(original, proposals))
    inv = load_inventory(str(written))
    assert inv.models["m"].engine_args == {"max_num_seqs": 4}
    assert inv.models["n"].engine_args == {}
    before, after = yaml.safe_load(original), yaml.safe_load(written.read_text())
    after["models"]["m"]["engine_args"] = {"max_num_seqs": 2}
    assert after == before


def test_a_proposal_vllm_would_refuse_is_withdrawn_with_the_refusal(tmp_path: Path) -> None:
    from vllmctl.catalog.loader import load_archs
    from vllmctl.inventory.model import runs_on_cpu
    from vllmctl.runner.fleet.refusals import vet_proposals

    path = tmp_path / "inv.yml"
    path.write_text(
        "vllmctl: 1\n"
        "hosts:\n  gpu-01: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 1}}\n"
        "models:\n"
        "  llama:\n    source: meta-llama/Llama-3.1-8B-Instruct\n    hosts: gpu-01\n    max_model_len: 8192\n"
        "    engine_args: {max_num_batched_tokens: 256, max_num_seqs: 128}\n"
    )
    inv = load_inventory(str(path))
    archs = load_archs([m.source for m in inv.models.values()], online=False)
    current = dict(inv.models["llama"].engine_args)
    too_many = Proposal("llama", current, {"max_num_seqs": 512}, "raise max_num_seqs")
    fine = Proposal("llama", current, {"max_num_seqs": 256}, "raise max_num_seqs")
    withdrawn, kept = vet_proposals(inv, [too_many, fine], archs, runs_on_cpu)
    assert withdrawn.changes == {}
    assert "withdrawn: vLLM would not start it" in withdrawn.reason
    assert "must be greater than or equal to max_num_seqs (512)" in withdrawn.reason
    assert kept.changes == {"max_num_seqs": 256}
