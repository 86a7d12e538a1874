"""The gate after an apply, end to end on a temp-dir host: a release is recorded and gated; a bad one is
rolled back to the known-good release, which serves again; an interrupted apply is finished or undone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from gate_flow import UNIT, VENV, apply_units, ctx, opts
from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthResult
from vllmctl.ops import Command
from vllmctl.ops.release import create_release
from vllmctl.releases.host import pointer_switch
from vllmctl.releases.unit_exit import exited_units
from vllmctl.runner.core.engine_watch import wait_for_health, watch_units
from vllmctl.runner.releases.release import desired_manifest, gate_host, read_releases, run_step
from vllmctl.tasks.desired import HostContext


@pytest.fixture
def host(tmp_path: Path) -> LocalRemote:
    remote = LocalRemote(tmp_path)
    python = remote.local(VENV) / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch(mode=0o755)
    return remote


def deploy(remote: LocalRemote, context: HostContext, second: int, keep: int = 5) -> Any:
    locks: list[bool] = []
    apply_units(remote, context)
    outcome = gate_host(context, remote, lambda: locks.append(True), opts(remote, second, keep))
    return outcome, locks


def test_first_good_release_becomes_current_and_known_good(host: LocalRemote) -> None:
    outcome, locks = deploy(host, ctx({"max_num_seqs": 8}), 1)
    assert outcome.status == "passed" and locks == [True]
    state = read_releases(host, "gpu1", 10)
    assert state.current == state.known_good == outcome.release
    assert outcome.release.startswith("20261121T090001Z-")
    assert outcome.figures["m"]["c4"]["ttft_p99_ms"] == pytest.approx(80.0)
    release = state.get(outcome.release)
    assert release is not None and release.verdict is not None and release.verdict["passed"] is True


def test_an_unchanged_host_takes_no_lock_and_writes_nothing(host: LocalRemote) -> None:
    first, _ = deploy(host, ctx({"max_num_seqs": 8}), 1)
    again, locks = deploy(host, ctx({"max_num_seqs": 8}), 2)
    assert (again.status, again.release, locks) == ("unchanged", first.release, [])
    assert len(read_releases(host, "gpu1", 10).releases) == 1


def test_a_flag_that_kills_the_engine_is_rolled_back_and_serves_the_old_flags(host: LocalRemote) -> None:
    good, _ = deploy(host, ctx({"max_num_seqs": 8}), 1)
    bad, _ = deploy(host, ctx({"max_num_seqs": 8, "bogus": True}), 2)
    assert bad.status == "rolled_back" and bad.rolled_back_to == good.release
    assert "journal tail" in bad.reasons[0] and "--bogus" in bad.reasons[0]
    assert bad.rollback_s == pytest.approx(1.5)
    unit = host.local(f"/etc/systemd/system/{UNIT}").read_text()
    assert "--bogus" not in unit and "--max-num-seqs 8" in unit
    state = read_releases(host, "gpu1", 10)
    assert (state.current, state.known_good) == (good.release, good.release)
    assert [r.status for r in state.releases] == ["good", "failed"]


def test_an_impossible_slo_is_rolled_back_with_the_figures(host: LocalRemote) -> None:
    good, _ = deploy(host, ctx({"max_num_seqs": 8}), 1)
    tight, _ = deploy(host, ctx({"max_num_seqs": 16}, slo={"ttft_p99_ms": 1.0}), 2)
    assert tight.status == "rolled_back" and tight.rolled_back_to == good.release
    assert tight.reasons[0] == "m: SLO miss, ttft_p99_ms: measured 80 at concurrency 1, SLO at most 1"
    assert "--max-num-seqs 8" in host.local(f"/etc/systemd/system/{UNIT}").read_text()


def test_a_failed_first_release_has_nothing_to_roll_back_to(host: LocalRemote) -> None:
    outcome, _ = deploy(host, ctx({"bogus": True}), 1)
    assert outcome.status == "failed" and not outcome.ok
    assert outcome.reasons[-1].startswith("not rolled back: gpu1: no earlier known-good release")
    assert read_releases(host, "gpu1", 10).known_good is None


def test_an_interrupted_apply_is_gated_on_the_next_run_without_a_new_release(host: LocalRemote) -> None:
    deploy(host, ctx({"max_num_seqs": 8}), 1)
    context = ctx({"max_num_seqs": 16})
    apply_units(host, context)
    half = desired_manifest(context, opts(host, 2))
    run_step(host, "gpu1", create_release(half, read_releases(host, "gpu1", 10)), 10)
    assert host.execute(Command(shell=pointer_switch("current", half.id)), 10).ok  # killed right here
    outcome, locks = deploy(host, context, 3)
    assert (outcome.status, outcome.release, locks) == ("passed", half.id, [True])
    assert len(read_releases(host, "gpu1", 10).releases) == 2


def test_a_pointer_at_a_half_made_release_is_replaced(host: LocalRemote) -> None:
    deploy(host, ctx({"max_num_seqs": 8}), 1)
    (host.local("/var/lib/vllmctl/releases") / "20261121T090002Z-deadbeef").mkdir()  # no manifest, no marker
    releases = host.local("/var/lib/vllmctl/releases")
    (releases / "current").unlink()
    (releases / "current").symlink_to("20261121T090002Z-deadbeef")
    outcome, _ = deploy(host, ctx({"max_num_seqs": 16}), 3)
    state = read_releases(host, "gpu1", 10)
    assert outcome.status == "passed" and state.current == outcome.release
    assert "20261121T090002Z-deadbeef" not in [r.id for r in state.releases]  # pruned as half-made


def test_old_releases_are_pruned_after_a_pass_but_never_the_known_good(host: LocalRemote) -> None:
    ids = [deploy(host, ctx({"max_num_seqs": n}), n)[0].release for n in (1, 2, 3, 4)]
    state = read_releases(host, "gpu1", 10)
    assert [r.id for r in state.releases] == ids
    last, _ = deploy(host, ctx({"max_num_seqs": 5}), 5, keep=2)
    assert [r.id for r in read_releases(host, "gpu1", 10).releases] == [ids[-1], last.release]


def test_an_apply_health_failure_is_not_probed_again_and_is_rolled_back(host: LocalRemote) -> None:
    good, _ = deploy(host, ctx({"max_num_seqs": 8}), 1)
    probes: list[str] = []
    context = ctx({"max_num_seqs": 8, "bogus": True})
    apply_units(host, context)
    options = opts(host, 2)
    probe = options.health

    def counting(
        url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        probes.append(url)
        return probe(url, model, deadline_s, on_progress)

    failure = "service_health vllmctl-m-0.service: not healthy after 300s"
    outcome = gate_host(context, host, lambda: None, replace(options, health=counting), failure)
    assert outcome.status == "rolled_back" and outcome.rolled_back_to == good.release
    assert outcome.reasons[0].startswith(failure + "\n  journal tail:\n    vllm: error: unrecognized")
    assert probes == ["http://10.0.0.1:8000"]  # only the rolled-back release was probed


def test_exited_units_from_systemctl_show() -> None:
    show = (
        "Id=vllmctl-a-0.service\nActiveState=active\nNRestarts=0\n\n"
        "Id=vllmctl-b-0.service\nActiveState=activating\nNRestarts=2\n\n"
        "Id=vllmctl-c-0.service\nActiveState=failed\nNRestarts=0\n"
    )
    assert exited_units(show) == [
        "vllmctl-b-0.service (activating/, 2 restarts since the wait began)",
        "vllmctl-c-0.service (failed/, 0 restarts since the wait began)",
    ]
    assert exited_units("") == []


def test_waiting_for_health_stops_as_soon_as_the_unit_has_died(host: LocalRemote) -> None:
    (host.root / "crashed").mkdir()
    (host.root / "crashed" / UNIT).touch()
    watch = watch_units(host, [UNIT], 10)
    result = wait_for_health("http://127.0.0.1:9", "m", 60.0, watch)  # nothing listens on port 9
    assert not result.ok and result.elapsed_s < 10
    assert result.last_error == f"the engine exited: {UNIT} (failed/failed, 0 restarts since the wait began)"
