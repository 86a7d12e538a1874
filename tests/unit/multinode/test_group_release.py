"""Group releases, pure: the same id on every node, manifests read back from a real directory tree with
the real listing command, the known-good across nodes, the rollback target, the steps as exact argv."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from vllmctl.inventory.model import Inventory
from vllmctl.multinode.group_ops import (
    EngineEnv,
    activation,
    create_group_release,
    engine_env_record,
    engine_journal_command,
    env_record_step,
    env_state_script,
    journal_errors,
    parse_env_state,
    parse_unit_state,
    pointer_step,
    restart_step,
    unit_state_script,
    verdict_step,
)
from vllmctl.multinode.plan import plan_cluster
from vllmctl.ops import Upload, sha256_text
from vllmctl.releases.group import (
    GroupManifest,
    GroupSpec,
    group_known_good,
    group_manifests,
    group_rollback_target,
    group_spec,
    parse_group_listing,
    unchanged,
)
from vllmctl.releases.host import HostReleases, Release, ReleaseError, listing_command, pointer_switch

VENV = "/opt/vllmctl/venvs/vllm-0.11.0"
RAY = "vllmctl-ray-big.service"
ENGINE = "vllmctl-llama-405b-0.service"
WHEN = "2026-11-21T09:00:05+00:00"
Load = Callable[[str], Inventory]


def spec(worker_unit: str = "[Service]\n# worker\n", engine: bool = True) -> GroupSpec:
    head_units = {RAY: "[Service]\n# head\n"} | ({ENGINE: "[Service]\n# engine\n"} if engine else {})
    return GroupSpec(
        group="big",
        model="llama-405b",
        head="gpu-01",
        nodes=("gpu-01", "gpu-02"),
        tp=8,
        pp=2,
        gpus_per_node=8,
        ray_address="192.168.50.1:6379",
        engine="vllm",
        engine_version="0.11.0",
        venv_path=VENV,
        units={"gpu-01": head_units, "gpu-02": {RAY: worker_unit}},
        models={"llama-405b": {"source": "meta-llama/Llama-3.1-405B", "ports": [8000]}} if engine else {},
    )


def released(release: str, status: str, worker_unit: str = "[Service]\n# worker\n") -> dict[str, Release]:
    """The same group release on both nodes, with the given status (good, failed, pending, incomplete)."""
    made = group_manifests(spec(worker_unit), WHEN, "ops@ctl", "d" * 64)
    verdict = None if status in ("pending", "incomplete") else {"passed": status == "good"}
    return {
        node: Release(release, status != "incomplete", replace(m, id=release), verdict)
        for node, m in made.items()
    }


def states(*releases: dict[str, Release], current: str | None = None) -> dict[str, HostReleases]:
    return {
        node: HostReleases(tuple(r[node] for r in releases if node in r), current, None, frozenset({VENV}))
        for node in ("gpu-01", "gpu-02")
    }


def test_every_node_gets_the_same_id_from_the_time_and_all_nodes_units() -> None:
    made = group_manifests(spec(), WHEN, "ops@ctl", "d" * 64)
    assert {m.id for m in made.values()} == {made["gpu-01"].id}
    assert made["gpu-01"].id.startswith("20261121T090005Z-")
    assert sorted(made["gpu-01"].units) == [ENGINE, RAY] and sorted(made["gpu-02"].units) == [RAY]
    assert made["gpu-02"].models == {} and made["gpu-01"].models["llama-405b"]["ports"] == [8000]
    assert (made["gpu-02"].head, list(made["gpu-02"].nodes), made["gpu-02"].pp) == (
        "gpu-01",
        ["gpu-01", "gpu-02"],
        2,
    )
    other = group_manifests(spec("[Service]\n# worker v2\n"), WHEN, "ops@ctl", "d" * 64)
    assert other["gpu-01"].id != made["gpu-01"].id  # only the worker's unit differs: the head's id moves too


def test_the_spec_renders_ray_units_everywhere_and_the_engine_on_the_head_only_when_started(
    load: Load,
) -> None:
    inv = load("""\
groups:
  big: {hosts: [gpu-01, gpu-02, gpu-03], multi_node: true, cluster_interface: eth1}
models:
  llama-405b: {source: meta-llama/Llama-3.1-405B, hosts: big, max_model_len: 8192}
""")
    model = inv.models["llama-405b"]
    assert model.cluster is not None
    plan = plan_cluster(inv, model, model.cluster)
    addresses = {"gpu-01": "192.168.50.1", "gpu-02": "192.168.50.2"}
    engine = inv.hosts["gpu-01"].engine
    ray_only = group_spec(inv, plan, engine, addresses, start_engine=False)
    assert {node: sorted(units) for node, units in ray_only.units.items()} == {
        "gpu-01": [RAY],
        "gpu-02": [RAY],
    }
    assert (ray_only.ray_address, ray_only.models, ray_only.venv_path) == ("192.168.50.1:6379", {}, VENV)
    served = group_spec(inv, plan, engine, addresses, start_engine=True)
    assert sorted(served.units["gpu-01"]) == [ENGINE, RAY] and sorted(served.units["gpu-02"]) == [RAY]
    assert served.models["llama-405b"]["ports"] == [8000]


def _sh(command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True, capture_output=True)


def test_a_node_listing_reads_back_manifests_verdicts_and_pointers_from_a_real_tree(tmp_path: Path) -> None:
    root, pointers = tmp_path / "releases", tmp_path
    made = group_manifests(spec(), WHEN, "ops@ctl", "d" * 64)["gpu-02"]
    done = root / made.id
    (done / "units").mkdir(parents=True)
    (done / "manifest.json").write_text(made.to_json())
    (done / "complete").write_text("")
    (done / "verdict.json").write_text('{"passed": true}')
    (root / "20261121T100000Z-half").mkdir()
    _sh(pointer_switch("current", made.id, str(root), str(pointers)))
    _sh(pointer_switch("known-good", made.id, str(root), str(pointers)))
    assert (pointers / "current").readlink() == Path(f"releases/{made.id}")
    output = subprocess.run(
        ["bash", "-c", listing_command(str(root), str(pointers))], capture_output=True, text=True, check=True
    ).stdout
    state = parse_group_listing(output, "gpu-02", "big")
    assert (state.current, state.known_good) == (made.id, made.id)
    assert [(r.id, r.status) for r in state.releases] == [
        (made.id, "good"),
        ("20261121T100000Z-half", "incomplete"),
    ]
    assert state.releases[0].manifest == made and isinstance(state.releases[0].manifest, GroupManifest)


def test_a_pointer_never_names_a_half_made_release(tmp_path: Path) -> None:
    (tmp_path / "releases" / "R1").mkdir(parents=True)
    with pytest.raises(subprocess.CalledProcessError):
        _sh(pointer_switch("current", "R1", str(tmp_path / "releases"), str(tmp_path)))
    assert not (tmp_path / "current").exists()


def test_known_good_is_the_newest_release_passed_on_every_node() -> None:
    r1, r2 = released("R1", "good"), released("R2", "good")
    assert group_known_good(states(r1, r2), ("gpu-01", "gpu-02")) == "R2"
    r2_failed_on_worker = {"gpu-01": r2["gpu-01"], "gpu-02": released("R2", "failed")["gpu-02"]}
    assert group_known_good(states(r1, r2_failed_on_worker), ("gpu-01", "gpu-02")) == "R1"
    r2_missing_on_worker = {"gpu-01": r2["gpu-01"]}
    assert group_known_good(states(r1, r2_missing_on_worker), ("gpu-01", "gpu-02")) == "R1"
    assert group_known_good(states(released("R1", "pending")), ("gpu-01", "gpu-02")) is None


def test_the_rollback_target_is_the_previous_known_good_or_the_named_one() -> None:
    nodes = ("gpu-01", "gpu-02")
    r1, r2, r3 = released("R1", "good"), released("R2", "good"), released("R3", "failed")
    assert group_rollback_target(states(r1, r2, current="R2"), nodes) == "R1"  # current good: the one before
    assert (
        group_rollback_target(states(r1, r2, r3, current="R3"), nodes) == "R2"
    )  # current failed: known-good
    assert group_rollback_target(states(r1, r2, current="R2"), nodes, "R2") == "R2"
    with pytest.raises(
        ReleaseError, match=r"R3 is not known-good on every node \(gpu-01 failed, gpu-02 failed\)"
    ):
        group_rollback_target(states(r1, r3, current="R1"), nodes, "R3")
    with pytest.raises(ReleaseError, match="no earlier group release is known-good on every node"):
        group_rollback_target(states(r1, current="R1"), nodes)
    gone = {
        node: replace(s, venvs=frozenset()) if node == "gpu-02" else s for node, s in states(r1, r2).items()
    }
    with pytest.raises(ReleaseError, match=f"gpu-02: group release R2 runs from {VENV}, which is gone"):
        group_rollback_target(gone, nodes, "R2")


def test_an_unchanged_run_needs_the_same_units_on_a_known_good_current_release() -> None:
    wanted = group_manifests(spec(), WHEN, "ops@ctl", "d" * 64)
    assert unchanged(states(released("R1", "good"), current="R1"), wanted)
    assert not unchanged(states(released("R1", "pending"), current="R1"), wanted)
    assert not unchanged(states(released("R1", "good", "[Service]\n# old\n"), current="R1"), wanted)
    assert not unchanged(states(released("R1", "good")), wanted)  # no current release


def test_a_complete_release_is_never_rewritten_and_a_half_made_one_is_redone() -> None:
    made = group_manifests(spec(), WHEN, "ops@ctl", "d" * 64)["gpu-02"]
    target = f"/var/lib/vllmctl/groups/big/releases/{made.id}"
    fresh = create_group_release(made, HostReleases())
    assert fresh.actions[0].render() == f"install -d -m 0755 -o root -g root {target} {target}/units"
    assert [getattr(a, "path", "") for a in fresh.actions[1:3]] == [
        f"{target}/manifest.json",
        f"{target}/units/{RAY}",
    ]
    assert fresh.actions[-1].render() == f"touch {target}/complete"
    assert create_group_release(made, HostReleases((Release(made.id, True, made),))).noop
    redo = create_group_release(made, HostReleases((Release(made.id, False),)))
    assert redo.actions[0].render() == f"rm -rf -- {target}"


def test_pointers_and_verdicts_live_in_the_groups_directory() -> None:
    assert pointer_step("big", "current", "R1").actions[0].render() == (
        "cd /var/lib/vllmctl/groups/big && test -f releases/R1/complete && ln -sfn releases/R1 .current.tmp "
        "&& mv -T .current.tmp current"
    )
    passed = verdict_step("big", "R1", {"passed": True})
    assert getattr(passed.actions[0], "path", "") == "/var/lib/vllmctl/groups/big/releases/R1/verdict.json"
    assert passed.actions[1].render().endswith("mv -T .known-good.tmp known-good")
    assert len(verdict_step("big", "R1", {"passed": False}).actions) == 1  # a failed one moves no pointer


def test_activation_keeps_an_unchanged_active_ray_unit_and_restarts_what_changed() -> None:
    import hashlib

    made = group_manifests(spec(), WHEN, "ops@ctl", "d" * 64)["gpu-01"]
    same = hashlib.sha256(made.units[RAY].encode()).hexdigest()
    kept = activation(made, {RAY: ("active", same), ENGINE: ("inactive", None)}, ENGINE)
    assert kept.restart == ()
    rendered = [a.render() for a in kept.install.actions]
    assert rendered[0].startswith("install -m 0644 -o root -g root /var/lib/vllmctl/groups/big/releases/")
    changed = activation(made, {RAY: ("active", "0" * 64), ENGINE: ("activating", "1" * 64)}, ENGINE)
    assert changed.restart == (RAY,)  # the engine is started after the barrier, not here
    assert changed.install.actions[0].render() == f"systemctl stop -- {ENGINE} {RAY}"
    ray_only = group_manifests(spec(engine=False), WHEN, "ops@ctl", "d" * 64)["gpu-01"]
    back = activation(ray_only, {RAY: ("active", "0" * 64), ENGINE: ("failed", "1" * 64)}, ENGINE)
    assert [a.render() for a in back.install.actions][:3] == [
        f"systemctl stop -- {RAY}",
        f"systemctl disable -- {ENGINE}",
        f"rm -f -- /etc/systemd/system/{ENGINE}",
    ]


def test_unit_state_and_engine_exit_are_read_from_systemctl_output() -> None:
    assert parse_unit_state(
        f"@@vllmctl-unit {RAY} active {'a' * 64}\n@@vllmctl-unit {ENGINE} inactive -\n"
    ) == {
        RAY: ("active", "a" * 64),
        ENGINE: ("inactive", None),
    }


def test_the_unit_state_script_runs_in_bash_and_reads_back_for_a_unit_not_installed() -> None:
    unit = "vllmctl-ray-no-such-group-here.service"
    output = subprocess.run(["bash", "-c", unit_state_script([unit])], capture_output=True, text=True).stdout
    [(state, digest)] = parse_unit_state(output).values()
    assert state in ("inactive", "unknown") and digest is None  # "unknown": no systemd on the test machine


def test_the_env_state_script_reads_the_file_now_and_the_digest_of_its_last_start(tmp_path: Path) -> None:
    env, record = tmp_path / "tiny.env", tmp_path / "engine-env.sha256"

    def read() -> EngineEnv:
        script = env_state_script(str(env), str(record))
        return parse_env_state(subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout)

    assert read() == EngineEnv(None, None)
    content = 'HF_TOKEN="hf_one"\n'
    env.write_text(content)
    now = read()
    assert now == EngineEnv(sha256_text(content), None)  # what the env_file operation uploaded, byte for byte
    record.write_text(now.now + "\n")  # what env_record_step leaves after a passed start
    assert read() == EngineEnv(now.now, now.now) and not read().changed()
    env.write_text('HF_TOKEN="hf_two"\n')
    assert read().changed()


def test_the_engine_restarts_when_its_env_file_is_not_the_one_it_last_passed_with() -> None:
    assert not EngineEnv(None, None).changed()  # no env file: nothing to restart for
    assert EngineEnv("a", None).changed()  # never recorded: the next start records it
    assert not EngineEnv("a", "a").changed()
    assert EngineEnv("a", "a").changed("b")  # --check: the file the per-host tasks will write
    assert not EngineEnv("b", "a").changed("a")


def test_the_env_record_is_root_only_in_the_groups_directory() -> None:
    (upload,) = env_record_step("big", "f" * 64).actions
    assert isinstance(upload, Upload)
    assert (upload.path, upload.content, upload.mode) == (engine_env_record("big"), "f" * 64 + "\n", "0600")
    assert upload.path == "/var/lib/vllmctl/groups/big/engine-env.sha256"


def test_the_engine_root_cause_is_found_above_the_reporting_traceback() -> None:
    journal = """\
(EngineCore pid=2342)   File ".../vllm/v1/executor/ray_utils.py", line 574, in initialize_ray_cluster
(EngineCore pid=2342)     raise ValueError(
(EngineCore pid=2364) ERROR [core.py:1510] ValueError: current platform cpu does not support ray.
Traceback (most recent call last):
  File ".../vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
vllmctl-tiny-0.service: Main process exited, code=exited, status=1/FAILURE
"""
    assert journal_errors(journal) == [
        "ValueError: current platform cpu does not support ray.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    assert engine_journal_command("vllmctl-tiny-0.service", "1763735000") == (
        "journalctl -u vllmctl-tiny-0.service --since @1763735000 --no-pager -o cat 2>&1 | tail -n 2000; true"
    )


def test_a_group_start_stops_waits_until_the_last_run_is_gone_then_starts() -> None:
    """#36: a plain `systemctl restart` would start the new Ray worker or engine beside a stuck one."""
    from vllmctl.ops.engine_gone import STALE_WAIT_S
    from vllmctl.paths import ENGINE_GONE_HELPER

    units = ("vllmctl-ray-g.service", "vllmctl-m-0.service")
    rendered = restart_step(units).rendered()
    assert rendered[0] == "systemctl stop -- vllmctl-ray-g.service vllmctl-m-0.service"
    assert rendered[-1] == "systemctl start -- vllmctl-ray-g.service vllmctl-m-0.service"
    assert rendered[-2] == f"python3 {ENGINE_GONE_HELPER} {STALE_WAIT_S:g} {' '.join(units)}"
    assert any(line.startswith(f"upload {ENGINE_GONE_HELPER} mode=0755") for line in rendered[1:-2])
    assert restart_step(()).noop == "nothing to restart"
