"""Pruning group releases after a pass: the host rule (the newest `keep`, half-made ones removed) on each
node, never a release any node's `current` or `known-good` names; the step as exact argv."""

from __future__ import annotations

from vllmctl.multinode.group_ops import prune_step
from vllmctl.releases.group import group_prune_candidates
from vllmctl.releases.host import HostReleases, Manifest, Release

NODES = ("gpu-01", "gpu-02")


def _state(statuses: dict[str, str], current: str | None, known_good: str | None) -> HostReleases:
    def one(release: str, status: str) -> Release:
        manifest = Manifest(release, "n", "", "", "", "vllm", "0.11.0", "/v", {})
        verdict = None if status == "pending" else {"passed": status == "good"}
        return Release(release, status != "incomplete", manifest if status != "incomplete" else None, verdict)

    return HostReleases(tuple(one(i, s) for i, s in sorted(statuses.items())), current, known_good)


def test_the_newest_keep_stay_and_half_made_ones_go_on_every_node() -> None:
    good = {f"R{i}": "good" for i in range(1, 6)} | {"R6": "incomplete"}
    states = {node: _state(good, "R5", "R5") for node in NODES}
    assert group_prune_candidates(states, NODES, keep=2) == {
        "gpu-01": ["R1", "R2", "R3", "R6"],
        "gpu-02": ["R1", "R2", "R3", "R6"],
    }
    assert group_prune_candidates(states, NODES, keep=5) == {"gpu-01": ["R6"], "gpu-02": ["R6"]}


def test_a_release_any_node_points_at_is_kept_on_every_node() -> None:
    statuses = {"R1": "good", "R2": "failed", "R3": "good", "R4": "good"}
    states = {
        "gpu-01": _state(statuses, "R4", "R4"),
        "gpu-02": _state(statuses, "R1", "R4"),  # this node was left on R1: R1 stays on both
    }
    assert group_prune_candidates(states, NODES, keep=1) == {"gpu-01": ["R2", "R3"], "gpu-02": ["R2", "R3"]}
    assert group_prune_candidates({"gpu-01": states["gpu-01"]}, NODES, keep=1) == {
        "gpu-01": ["R1", "R2", "R3"]
    }


def test_the_prune_step_removes_release_dirs_under_the_group() -> None:
    step = prune_step("big", ["R2", "R1"])
    assert [a.render() for a in step.actions] == [
        "rm -rf -- /var/lib/vllmctl/groups/big/releases/R1 /var/lib/vllmctl/groups/big/releases/R2"
    ]
    assert prune_step("big", []).noop
