"""Group releases in `history` and `rollback`: rows across nodes from HostReleases fixtures, which groups a
host selection rolls back as a whole, and the commands' output with the SSH reads replaced by fixtures."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from vllmctl.commands import history, rollback
from vllmctl.console import Ui
from vllmctl.errors import InputError, TransportError, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.releases.group import GroupManifest
from vllmctl.releases.group_history import GroupNodes, group_history_rows, select_groups
from vllmctl.releases.host import HostReleases, Release
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.multinode import group_rollback
from vllmctl.tasks.desired import HostContext

NODES = ("gpu-01", "gpu-02")
BASE = """\
vllmctl: 1
defaults:
  engine: {name: vllm, version: "0.11.0"}
  gpus: {model: H100-80GB, count: 8}
hosts:
  gpu-01: {address: 10.0.0.11}
  gpu-02: {address: 10.0.0.12}
  gpu-03: {address: 10.0.0.13}
"""
VENV = "/opt/vllmctl/venvs/vllm-0.11.0"
GROUPS = """\
groups:
  big: {hosts: [gpu-01, gpu-02, gpu-03], multi_node: true, cluster_interface: eth1}
models:
  llama-405b: {source: meta-llama/Llama-3.1-405B, hosts: big, max_model_len: 8192}
"""


def _release(release: str, node: str, status: str, reasons: Sequence[str] = ()) -> Release:
    manifest = GroupManifest(
        id=release,
        host=node,
        created_at="2026-11-21T09:00:05+00:00",
        created_by="ops@ctl",
        inventory_digest="d" * 64,
        engine="vllm",
        engine_version="0.11.0",
        venv_path=VENV,
        units={"vllmctl-ray-big.service": "[Service]\n"},
        group="big",
        model="llama-405b",
        head="gpu-01",
        nodes=list(NODES),
    )
    verdict = None if status == "pending" else {"passed": status == "good", "reasons": list(reasons)}
    return Release(release, True, manifest, verdict)


def _fleet() -> dict[str, HostReleases]:
    """R1 good on both; R2 failed on both; R3 good on the head only.
    The head is back on R1, the worker was left on R2; R1 is known-good on both."""
    head = (
        _release("R1", "gpu-01", "good"),
        _release("R2", "gpu-01", "failed", ["not formed"]),
        _release("R3", "gpu-01", "good"),
    )
    worker = (_release("R1", "gpu-02", "good"), _release("R2", "gpu-02", "failed", ["not formed"]))
    return {
        "gpu-01": HostReleases(head, "R1", "R1", frozenset({VENV})),
        "gpu-02": HostReleases(worker, "R2", "R1", frozenset({VENV})),
    }


def test_rows_give_each_group_release_its_status_nodes_and_the_pointers_nodes_disagree_on() -> None:
    rows = group_history_rows(NODES, _fleet())
    assert [(r["id"], r["status"], r["on"], r["pointers"]) for r in rows] == [
        ("R1", "good", ["gpu-01", "gpu-02"], ["current on gpu-01", "known-good"]),
        ("R2", "failed", ["gpu-01", "gpu-02"], ["current on gpu-02"]),
        ("R3", "missing", ["gpu-01"], []),  # good on the head alone is not good for the group
    ]
    assert rows[1]["reasons"] == ["not formed"] and rows[2]["statuses"] == {
        "gpu-01": "good",
        "gpu-02": "missing",
    }
    assert (rows[0]["engine"], rows[0]["created_by"]) == ("vllm 0.11.0", "ops@ctl")


def test_pointers_every_node_agrees_on_are_shown_plainly_and_an_unread_node_is_left_out() -> None:
    fleet = _fleet()
    fleet["gpu-02"] = replace(fleet["gpu-02"], current="R1")
    assert group_history_rows(NODES, fleet)[0]["pointers"] == ["current", "known-good"]
    only_head = group_history_rows(NODES, {"gpu-01": fleet["gpu-01"]})
    assert [(r["id"], r["status"]) for r in only_head] == [("R1", "good"), ("R2", "failed"), ("R3", "good")]
    assert group_history_rows(NODES, {}) == []


@pytest.fixture
def inv_file(tmp_path: Path) -> Callable[[str], Path]:
    def write(extra: str = "") -> Path:
        path = tmp_path / "inv.yml"
        path.write_text(BASE + GROUPS + extra)
        return path

    return write


def _big(spare: tuple[str, ...] = ("gpu-03",)) -> GroupNodes:
    return GroupNodes("big", "llama-405b", NODES, spare)


def test_a_group_is_rolled_back_whole_or_refused_and_its_hosts_are_covered(
    inv_file: Callable[[str], Path],
) -> None:
    inv = load_inventory(inv_file())
    whole = select_groups(inv, [_big()], ["gpu-01", "gpu-02", "gpu-03"])
    assert whole.groups == (_big(),)
    assert whole.covered == {
        "gpu-01": "rolled back with group 'big' (llama-405b)",
        "gpu-02": "rolled back with group 'big' (llama-405b)",
        "gpu-03": "a spare host of group 'big': no release to roll back",
    }
    with pytest.raises(InputError) as caught:
        select_groups(inv, [_big()], ["gpu-02"])
    assert caught.value.message == (
        "--limit selects gpu-02 but not gpu-01 of group 'big': a multi-node group is rolled back as a whole, "
        "on all its nodes (gpu-01, gpu-02)"
    )
    assert caught.value.hint == "select the whole group: --limit big"
    assert select_groups(inv, [_big()], ["gpu-03"]).groups == ()


def test_a_host_that_also_serves_a_single_host_model_keeps_its_own_rollback(
    inv_file: Callable[[str], Path],
) -> None:
    inv = load_inventory(
        inv_file("  small: {source: meta-llama/Llama-3.1-8B-Instruct, hosts: gpu-02, port: 8001}\n")
    )
    assert set(select_groups(inv, [_big()], list(NODES)).covered) == {"gpu-01"}


def _args(path: Path, **kw: Any) -> argparse.Namespace:
    base = {"inventory": str(path), "host": None, "limit": None, "to": None, "yes": False, "forks": 4}
    base |= {
        "command_timeout": 10.0,
        "health_timeout": 5.0,
        "break_lock": False,
        "json": True,
        "timeout": 10.0,
        "max_fail": MaxFail(),
        "wait_available": 1.0,
    }
    return argparse.Namespace(**(base | kw))


def _no_host_releases(ctx: HostContext) -> Any:
    raise TransportError(f"{ctx.host.name}: unreachable", "check the host")


def test_history_shows_the_group_and_an_unreachable_node_as_an_error(
    inv_file: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = inv_file()
    monkeypatch.setenv("COLUMNS", "250")

    def read(
        inv: Inventory, nodes: Sequence[str], group: str, timeout_s: float
    ) -> Mapping[str, HostReleases | VllmctlError]:
        assert (tuple(nodes), group) == (NODES, "big")
        return {
            "gpu-01": _fleet()["gpu-01"],
            "gpu-02": TransportError("gpu-02: connection refused", "check it"),
        }

    out, err = io.StringIO(), io.StringIO()
    code = history.run(_args(path, host="gpu-01"), Ui(out=out, err=err), _no_host_releases, read)
    assert code == 1
    shown = json.loads(out.getvalue())["groups"]["big"]
    assert (shown["nodes"], shown["current"], shown["known_good"]) == (
        list(NODES),
        {"gpu-01": "R1"},
        {"gpu-01": "R1"},
    )
    assert [r["id"] for r in shown["releases"]] == ["R1", "R2", "R3"]
    assert shown["errors"] == {"gpu-02": {"error": "gpu-02: connection refused", "hint": "check it"}}
    assert "error: group big: gpu-02: connection refused" in err.getvalue()

    out, err = io.StringIO(), io.StringIO()
    code = history.run(_args(path, host="gpu-01", json=False), Ui(out=out, err=err), _no_host_releases, read)
    table = out.getvalue()
    assert (
        "group big (llama-405b on gpu-01, gpu-02): group releases" in table
        and "current on gpu-01" not in table
    )
    assert "R3" in table and "known-good" in table


def test_rollback_plans_the_group_as_one_and_leaves_its_hosts_out_of_the_per_host_part(
    inv_file: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = inv_file()
    asked: list[tuple[str, tuple[str, ...], str | None]] = []

    def plan(
        inv: Inventory, group: str, hosts: Sequence[str], to: str | None, timeout_s: float, connect: Any
    ) -> tuple[dict[str, str | None], str]:
        asked.append((group, tuple(hosts), to))
        return {"gpu-01": "R2", "gpu-02": "R2"}, "R1"

    monkeypatch.setattr(group_rollback, "rollback_plan", plan)
    out, err = io.StringIO(), io.StringIO()
    code = rollback.run(_args(path, to="R1"), Ui(out=out, err=err), _no_host_releases)
    assert code == 3, err.getvalue()  # no "no release" error for the group's hosts: they are not surveyed
    shown = json.loads(out.getvalue())
    assert asked == [("big", NODES, "R1")]
    assert shown["plan"] == {} and shown["problems"] == []
    assert shown["groups"]["big"] == {
        "model": "llama-405b",
        "nodes": list(NODES),
        "current": {"gpu-01": "R2", "gpu-02": "R2"},
        "to": "R1",
    }
    assert shown["covered"]["gpu-03"] == "a spare host of group 'big': no release to roll back"
    with pytest.raises(InputError, match="rolled back as a whole, on all its nodes \\(gpu-01, gpu-02\\)"):
        rollback.run(_args(path, limit="gpu-01"), Ui(out=io.StringIO(), err=io.StringIO()), _no_host_releases)


def test_a_group_the_inventory_no_longer_plans_is_rolled_back_from_the_nodes_its_hosts_record(
    inv_file: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = inv_file()
    path.write_text(path.read_text().replace("max_model_len: 8192", "max_model_len: 1048576"))
    inv = load_inventory(path)
    fleet = _fleet()
    fleet["gpu-02"] = replace(fleet["gpu-02"], current="R1")
    listings: dict[str, HostReleases | VllmctlError] = {**fleet, "gpu-03": HostReleases()}
    monkeypatch.setattr(group_rollback, "read_group_listings", lambda *args: listings)
    selection, problems = group_rollback.select(inv, ["gpu-01", "gpu-02", "gpu-03"], 10, lambda host: None)
    assert (selection.groups, problems) == ((_big(),), [])
    assert selection.covered["gpu-03"] == "a spare host of group 'big': no release to roll back"

    listings = {"gpu-01": TransportError("gpu-01: unreachable", "check it"), "gpu-02": HostReleases()}
    selection, problems = group_rollback.select(inv, ["gpu-01", "gpu-02", "gpu-03"], 10, lambda host: None)
    assert selection.groups == () and len(problems) == 1
    assert problems[0].startswith("group of llama-405b: not rolled back: it cannot be planned (")
    assert "none of them records a current group release (gpu-01 did not answer)" in problems[0]
    assert selection.covered["gpu-01"] == "its group's model llama-405b could not be planned"
