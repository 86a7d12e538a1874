"""Release logic as data cases: pruning, rollback target choice, recovery after an interrupted apply;
the manifest round trip, ids, and the listing and pointer commands run by a real shell on a temp dir."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from builders import VENV, host_state, manifest

from vllmctl.errors import InputError
from vllmctl.releases.host import (
    RELEASES_DIR,
    VENVS_DIR,
    ReleaseError,
    listing_command,
    manifest_from_json,
    parse_listing,
    pointer_switch,
    prune_candidates,
    recovery_needed,
    release_id,
    rollback_target,
    serving_digest,
)
from vllmctl.runner.releases.history import history_rows

CASES = Path(__file__).parent / "cases"


def cases(kind: str) -> list[Any]:
    docs = json.loads((CASES / f"{kind}.json").read_text())
    return [pytest.param(doc, id=doc["name"]) for doc in docs]


@pytest.mark.parametrize("case", cases("prune"))
def test_prune(case: dict[str, Any]) -> None:
    assert prune_candidates(host_state(case["state"]), case["keep"]) == case["removed"]


@pytest.mark.parametrize("case", cases("rollback_target"))
def test_rollback_target(case: dict[str, Any]) -> None:
    state = host_state(case["state"])
    if "error" in case:
        with pytest.raises(ReleaseError) as raised:
            rollback_target(state, "gpu1", case.get("to"))
        assert raised.value.message == case["error"]
        assert raised.value.hint
    else:
        assert rollback_target(state, "gpu1", case.get("to")).id == case["target"]


@pytest.mark.parametrize("case", cases("recovery"))
def test_recovery(case: dict[str, Any]) -> None:
    action, reason = recovery_needed(host_state(case["state"]))
    assert action == case["action"]
    assert reason


def test_prune_refuses_keep_zero() -> None:
    with pytest.raises(InputError, match="at least 1"):
        prune_candidates(host_state({"releases": []}), 0)


def test_release_ids_sort_by_time_and_differ_by_content() -> None:
    early = release_id(datetime(2026, 11, 21, 9, 0, 5, tzinfo=UTC), "ab" * 32)
    late = release_id(datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC), "00" * 32)
    assert early == "20261121T090005Z-abababab"
    assert early < late
    same_second = release_id(datetime(2026, 11, 21, 9, 0, 5, tzinfo=UTC), "cd" * 32)
    assert same_second != early


def test_serving_digest_depends_on_units_and_venv_not_order() -> None:
    base = serving_digest({"a": "1", "b": "2"}, VENV)
    assert base == serving_digest({"b": "2", "a": "1"}, VENV)
    assert base != serving_digest({"a": "1", "b": "3"}, VENV)
    assert base != serving_digest({"a": "1", "b": "2"}, VENV + "x")


def test_manifest_round_trip_and_unreadable_manifest() -> None:
    original = manifest("r1")
    assert manifest_from_json(original.to_json(), "x") == original
    with pytest.raises(ReleaseError, match="gpu1:/r: unreadable release manifest"):
        manifest_from_json('{"id": "r1"}', "gpu1:/r")


def test_pointer_switch_is_exact_and_atomic() -> None:
    assert pointer_switch("current", "20261121T090005Z-abababab") == (
        "cd /var/lib/vllmctl/releases && test -f 20261121T090005Z-abababab/complete && "
        "ln -sfn 20261121T090005Z-abababab .current.tmp && mv -T .current.tmp current"
    )
    assert pointer_switch("known-good", "r'1") == (
        "cd /var/lib/vllmctl/releases && test -f 'r'\"'\"'1'/complete && "
        "ln -sfn 'r'\"'\"'1' .known-good.tmp && mv -T .known-good.tmp known-good"
    )
    with pytest.raises(ValueError):
        pointer_switch("previous", "r1")


def _sh(command: str, root: Path) -> subprocess.CompletedProcess[str]:
    local = command.replace(RELEASES_DIR, str(root / "releases")).replace(VENVS_DIR, str(root / "venvs"))
    return subprocess.run(["bash", "-c", local], capture_output=True, text=True, check=False)


def _write_release(root: Path, release: str, complete: bool, verdict: dict[str, Any] | None) -> None:
    folder = root / "releases" / release
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(manifest(release).to_json())
    if complete:
        (folder / "complete").touch()
    if verdict is not None:
        (folder / "verdict.json").write_text(json.dumps(verdict))


def test_listing_and_pointers_on_a_real_directory(tmp_path: Path) -> None:
    venv_bin = tmp_path / "venvs" / "vllm-0.11.0" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").touch(mode=0o755)
    (tmp_path / "venvs" / "sglang-0.5").mkdir()  # no python inside: not usable
    _write_release(tmp_path, "r1", True, {"passed": True, "reasons": [], "figures": {"m": {"health_s": 3}}})
    _write_release(tmp_path, "r2", True, {"passed": False, "reasons": ["m: SLO miss"], "figures": {}})
    _write_release(tmp_path, "r3", False, None)

    assert _sh(pointer_switch("current", "r3"), tmp_path).returncode != 0  # half-made: refused
    assert not (tmp_path / "releases" / "current").exists()
    assert _sh(pointer_switch("known-good", "r1"), tmp_path).returncode == 0
    assert _sh(pointer_switch("current", "r2"), tmp_path).returncode == 0
    assert _sh(pointer_switch("current", "r1"), tmp_path).returncode == 0  # over an existing link

    listed = _sh(listing_command(), tmp_path)
    assert listed.returncode == 0, listed.stderr
    state = parse_listing(listed.stdout, "gpu1")
    assert [(r.id, r.status) for r in state.releases] == [
        ("r1", "good"),
        ("r2", "failed"),
        ("r3", "incomplete"),
    ]
    assert (state.current, state.known_good) == ("r1", "r1")
    assert state.venvs == {str(tmp_path / "venvs" / "vllm-0.11.0")}
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == [
        "current",
        "known-good",
        "r1",
        "r2",
        "r3",
    ]


def test_listing_of_a_host_without_releases(tmp_path: Path) -> None:
    listed = _sh(listing_command(), tmp_path)
    assert listed.returncode == 0
    state = parse_listing(listed.stdout, "gpu1")
    assert state.releases == () and state.current is None
    (tmp_path / "releases").mkdir()
    state = parse_listing(_sh(listing_command(), tmp_path).stdout, "gpu1")
    assert state.releases == () and state.current is None


def test_listing_reports_a_held_lock_even_on_a_host_without_releases(tmp_path: Path) -> None:
    lock, owner = tmp_path / "lock", "root@ctl pid=123 since=2026-11-28T03:00:00+00:00 boot=b1 cmd=apply"
    listing = listing_command(lock_dir=str(lock))
    assert parse_listing(_sh(listing, tmp_path).stdout, "gpu1").lock is None
    lock.mkdir()
    assert parse_listing(_sh(listing, tmp_path).stdout, "gpu1").lock == ""  # no owner file yet
    (lock / "owner").write_text(owner + "\n")
    assert not (tmp_path / "releases").exists()
    assert parse_listing(_sh(listing, tmp_path).stdout, "gpu1").lock == owner
    _write_release(tmp_path, "r1", True, {"passed": True, "reasons": [], "figures": {}})
    assert _sh(pointer_switch("current", "r1"), tmp_path).returncode == 0
    state = parse_listing(_sh(listing, tmp_path).stdout, "gpu1")
    assert (state.lock, state.current) == (owner, "r1")
    assert [(r.id, r.status) for r in state.releases] == [("r1", "good")]


def test_history_rows_in_order_with_pointers_and_figures() -> None:
    state = host_state(
        {
            "releases": [{"id": "r1", "status": "good"}, {"id": "r2", "status": "failed"}],
            "current": "r1",
            "known_good": "r1",
        }
    )
    rows = history_rows("gpu1", state)
    assert [(r["id"], r["status"], r["pointers"]) for r in rows] == [
        ("r1", "good", ["current", "known-good"]),
        ("r2", "failed", []),
    ]
    assert rows[0]["engine"] == "vllm 0.11.0"
