"""On real lab hosts over real SSH: `vllmctl apply` deploys a multi-node model itself, the lab's Ray stand-in
(docs/multinode.md) on two hosts: the first apply stages everything and passes one group release (health
and the smoke benchmark), `status` and `history` show it as one serving release, a second apply changes
nothing, a changed env file alone (a rotated token) restarts the engine alone as a new release, a changed
engine argument is a new release (`--check --diff` shows the unit diff first), one the
engine refuses rolls the group back to the previous release, which serves again, and `vllmctl rollback`
takes the whole group one release further back, even from an inventory that no longer plans; after each
rollback `apply --check` of what serves changes nothing (one module, in order: the hosts are set up once)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from raylab import GROUP, GROUP_DIR, RayLab
from standinlab import complete, hostnames, standin_lab_session

from vllmctl.lab.testing import LabFleet

pytestmark = pytest.mark.lab

EXIT_CHANGES = 3


@pytest.fixture(scope="module")
def lab(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayLab]:
    # nothing prepared: apply stages the model and the engine venv on both nodes itself
    yield from standin_lab_session(lab_fleet, tmp_path_factory.mktemp("applygroup"))


def apply(lab: RayLab, name: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    return lab.apply(name, *extra, timeout=1200)


def pointers(lab: RayLab) -> dict[str, tuple[str, str]]:
    return lab.pointers()


def serves_from_both_nodes(lab: RayLab) -> None:
    text = complete(lab)["choices"][0]["text"]
    assert "vLLM stand-in (vllmctl lab)" in text, text
    for name in hostnames(lab):
        assert name in text, text


def set_max_model_len(lab: RayLab, value: int | None) -> None:
    args = lab.doc["models"]["tiny"]["engine_args"]
    if value is None:
        args.pop("max_model_len", None)
    else:
        args["max_model_len"] = value


def check_changes_nothing(lab: RayLab, name: str) -> None:
    """`apply --check` of the inventory that matches what serves: exit 0, the group unchanged (#19)."""
    code, doc, stderr = apply(lab, name, "--check")
    assert code == 0, json.dumps(doc.get("groups"), indent=1) + stderr[-3000:]
    assert doc["groups"]["tiny"]["status"] == "unchanged", doc["groups"]


RELEASES: dict[str, str] = {}  # shared by the tests of this module, which run in order


def test_a_first_apply_stages_the_nodes_and_passes_one_group_release(lab: RayLab) -> None:
    code, doc, stderr = apply(lab, "first.yml")
    assert code == 0, stderr[-4000:]
    group = doc["groups"]["tiny"]
    assert (group["group"], group["status"], group["ok"]) == (GROUP, "passed", True), group
    assert group["nodes"] == [h.name for h in lab.hosts]
    release = group["release"]
    assert pointers(lab) == {h.name: (release, release) for h in lab.hosts}
    serves_from_both_nodes(lab)
    verdict = json.loads(lab.sh(lab.hosts[0], f"sudo cat {GROUP_DIR}/releases/{release}/verdict.json"))
    smoke = verdict["figures"]["tiny"]  # the smoke benchmark streamed from the head, as on a host
    assert verdict["passed"] and {"c1", "c4"} <= set(smoke), verdict
    assert smoke["c4"]["error_rate"] == 0 and smoke["c4"]["output_tokens_per_s"] > 0, smoke
    RELEASES["first"] = release


def test_status_and_history_show_the_serving_group_as_one_release(lab: RayLab) -> None:
    head, worker = lab.hosts
    inventory = str(lab.inventory("status.yml"))
    shown = lab.vllmctl("status", inventory, "--json", "--interval", "0")
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    [entry] = json.loads(shown.stdout)["entries"]  # one entry, on the head: no half-engine on the worker
    assert (entry["host"], entry["model"], entry["healthy"], entry["ok"]) == (head.name, "tiny", True, True)
    group = entry["group"]
    assert (group["formed"], group["engine"], group["ray_nodes"], group["problems"]) == (
        True,
        "active",
        2,
        [],
    )
    assert entry["release"] == RELEASES["first"]
    history = lab.vllmctl("history", inventory, "--json")
    assert history.returncode == 0, history.stdout[-3000:] + history.stderr[-3000:]
    [row] = json.loads(history.stdout)["groups"][GROUP]["releases"]
    assert (row["id"], row["status"], row["on"]) == (RELEASES["first"], "good", [head.name, worker.name])
    assert sorted(row["pointers"]) == ["current", "known-good"]


def test_a_second_apply_changes_nothing(lab: RayLab) -> None:
    code, doc, stderr = apply(lab, "again.yml")
    assert code == 0, stderr[-4000:]
    group = doc["groups"]["tiny"]
    assert (group["status"], group["release"]) == ("unchanged", RELEASES["first"]), group
    assert {name: host["recap"]["changed"] for name, host in doc["hosts"].items()} == {
        h.name: 0 for h in lab.hosts
    }
    code, doc, stderr = apply(lab, "again.yml", "--check")
    assert code == 0, stderr[-4000:]
    assert doc["groups"]["tiny"]["status"] == "unchanged"
    by_hand = lab.vllmctl("cluster", str(lab.inventory("again.yml")), "tiny", "--start-engine")
    assert by_hand.returncode == 0, by_hand.stdout[-3000:] + by_hand.stderr[-3000:]
    assert f"group release {RELEASES['first']} unchanged and active" in by_hand.stderr  # the same release


def unit_show(lab: RayLab, host: Any, unit: str, prop: str) -> str:
    return lab.sh(host, f"systemctl show -p {prop} --value -- {unit}").strip()


def test_a_changed_env_file_alone_restarts_the_engine_as_a_new_group_release(lab: RayLab) -> None:
    head = lab.hosts[0]
    token = lab.workdir / "hf_token"
    token.write_text("hf_lab_rotated\n")
    token.chmod(0o600)  # vllmctl refuses a secret file others may read
    lab.doc["secrets"] = {"hf_token": {"file": str(token)}}  # the env files get HF_TOKEN; no unit changes
    engine, ray = "vllmctl-tiny-0.service", f"vllmctl-ray-{GROUP}.service"
    started = {h.name: unit_show(lab, h, ray, "InvocationID") for h in lab.hosts}
    engine_started = unit_show(lab, head, engine, "InvocationID")
    code, doc, stderr = apply(lab, "token.yml", "--check")
    assert code == EXIT_CHANGES, stderr[-4000:]
    planned = doc["groups"]["tiny"]
    assert planned["status"] == "would_change", planned
    why = f"{head.name}: /etc/vllmctl/tiny.env changed: the engine would be restarted"
    assert planned["reasons"] == [why]
    code, doc, stderr = apply(lab, "token.yml")
    assert code == 0, stderr[-4000:]
    group = doc["groups"]["tiny"]
    assert group["status"] == "passed" and group["release"] > RELEASES["first"], group
    assert "tiny.env differs from the engine's last start: restarting it" in stderr
    assert unit_show(lab, head, engine, "InvocationID") != engine_started
    pid = unit_show(lab, head, engine, "MainPID")
    assert "HF_TOKEN=hf_lab_rotated" in lab.sh(head, f"sudo cat /proc/{pid}/environ | tr '\\0' '\\n'")
    assert {h.name: unit_show(lab, h, ray, "InvocationID") for h in lab.hosts} == started  # Ray kept running
    serves_from_both_nodes(lab)
    code, doc, stderr = apply(lab, "token-again.yml")
    assert code == 0, stderr[-4000:]
    again = doc["groups"]["tiny"]
    assert (again["status"], again["release"]) == ("unchanged", group["release"])
    RELEASES["token"] = group["release"]


def test_a_changed_engine_argument_is_a_new_group_release(lab: RayLab) -> None:
    set_max_model_len(lab, 256)
    code, doc, stderr = apply(lab, "len256.yml", "--check", "--diff")
    assert code == EXIT_CHANGES, stderr[-4000:]
    planned = doc["groups"]["tiny"]
    head = lab.hosts[0].name
    assert planned["status"] == "would_change", doc["groups"]
    assert planned["reasons"] == [f"{head}: vllmctl-tiny-0.service would change and be restarted"]
    [diff] = planned["diffs"]  # the engine unit only: the Ray units stay as they are
    assert f"{head}:/etc/systemd/system/vllmctl-tiny-0.service (host)" in diff
    assert any(line.startswith("+ExecStart=") and "256" in line for line in diff.splitlines()), diff
    assert pointers(lab) == {h.name: (RELEASES["token"], RELEASES["token"]) for h in lab.hosts}
    code, doc, stderr = apply(lab, "len256.yml")
    assert code == 0, stderr[-4000:]
    group = doc["groups"]["tiny"]
    assert group["status"] == "passed" and group["release"] > RELEASES["token"], group
    assert pointers(lab) == {h.name: (group["release"], group["release"]) for h in lab.hosts}
    serves_from_both_nodes(lab)
    RELEASES["len256"] = group["release"]


def test_a_start_the_engine_refuses_rolls_the_group_back(lab: RayLab) -> None:
    # the planner accepts any tokenizer path; the engine cannot load one that is not there
    lab.doc["models"]["tiny"]["engine_args"]["tokenizer"] = "/nonexistent/tokenizer"
    code, doc, stderr = apply(lab, "notokenizer.yml")
    assert code == 1, stderr[-4000:]
    group = doc["groups"]["tiny"]
    assert (group["status"], group["ok"]) == ("rolled_back", False), group
    assert group["rolled_back_to"] == RELEASES["len256"]
    refused = "OSError: Can't load tokenizer for '/nonexistent/tokenizer'"
    assert any(refused in reason for reason in group["reasons"]), group
    assert pointers(lab) == {h.name: (RELEASES["len256"], RELEASES["len256"]) for h in lab.hosts}
    serves_from_both_nodes(lab)
    del lab.doc["models"]["tiny"]["engine_args"]["tokenizer"]
    check_changes_nothing(lab, "len256-again.yml")  # the state describes the release that serves again


def test_vllmctl_rollback_takes_the_whole_group_back_to_the_release_before(lab: RayLab) -> None:
    # an inventory the planner refuses (the model has 2048 positions): the rollback needs only the hosts
    set_max_model_len(lab, 4096)
    inventory = str(lab.inventory("rollback.yml"))
    planned = lab.vllmctl("rollback", inventory, "--json")
    assert planned.returncode == EXIT_CHANGES, planned.stdout[-3000:] + planned.stderr[-3000:]
    assert json.loads(planned.stdout)["groups"][GROUP]["to"] == RELEASES["token"]
    done = lab.vllmctl("rollback", inventory, "--yes", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    group = json.loads(done.stdout)["groups"][GROUP]
    assert (group["status"], group["rolled_back_to"]) == ("reactivated", RELEASES["token"]), group
    assert pointers(lab) == {h.name: (RELEASES["token"], RELEASES["token"]) for h in lab.hosts}
    serves_from_both_nodes(lab)
    set_max_model_len(lab, None)  # the token release's inventory
    check_changes_nothing(lab, "token-serving.yml")
