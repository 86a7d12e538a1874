"""Hostile values on real lab hosts (systemd 252, sudo, real bash): a unit and env file rendered from them
run the exact argv and environment under the real systemd; a hostile manifest entry is never deleted by a
real apply; an existing destination keeps its mode; a model folder linking out is refused by name."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmctl.inventory.model import (
    ClusterSpec,
    DriverSpec,
    EngineSpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    SecretRef,
    SshSettings,
)
from vllmctl.lab.testing import LabFleet, LabHostInfo
from vllmctl.multinode.units import RAY_DIR, ray_unit_name, render_ray_unit
from vllmctl.tasks import desired
from vllmctl.tasks.desired import HostContext, ModelPlan, Replica, render_env, render_unit

pytestmark = pytest.mark.lab

HOSTILE = "a \"q\" 'x' $HOME ${USER} `id` $(id) 100% %n ; && | \\ é ✓ -x --port 22 #c =e"
PROBE = "/var/tmp/vllmctl-quoting-probe"
DUMP = """\
import json, os, sys
with open(os.path.join(os.environ["PROBE_DIR"], os.environ.get("PROBE_OUT", "out.json")), "w") as out:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, out)
"""


def _sh(fleet: LabFleet, host: LabHostInfo, command: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        fleet.ssh_argv(host, command), input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


@pytest.fixture
def spare(lab_fleet: LabFleet) -> LabHostInfo:
    return lab_fleet.hosts[3]


def _run_unit(
    fleet: LabFleet, host: LabHostInfo, name: str, text: str, out: str
) -> tuple[dict[str, Any], str]:
    """Install `text` as unit `name`, start it under the real systemd, return what its process saw."""
    _sh(fleet, host, f"sudo tee /etc/systemd/system/{name} >/dev/null", text)
    _sh(fleet, host, f"sudo systemctl daemon-reload && sudo systemctl start {name}")
    deadline = time.monotonic() + 60
    while fleet.ssh(host, f"test -s {PROBE}/{out}").returncode != 0:
        assert time.monotonic() < deadline, _sh(fleet, host, f"sudo journalctl -u {name} --no-pager")
        time.sleep(0.5)
    journal = _sh(fleet, host, f"sudo journalctl -u {name} --no-pager -o cat")
    return json.loads(_sh(fleet, host, f"cat {PROBE}/{out}")), journal


def test_real_systemd_runs_exactly_the_rendered_argv_and_environment(
    lab_fleet: LabFleet, spare: LabHostInfo
) -> None:
    engine = EngineSpec("vllm", "0.0.1-quoting-probe")
    args: dict[str, Any] = {"tokenizer": HOSTILE, "custom_list": ["--port 22", "$(id)", "%%"], "seed": 7}
    source = f"/srv/models/{HOSTILE.replace(' ', '_').replace('/', '_')}"
    model = ModelDeployment(
        "quoting-probe", source, (spare.name,), port=8999, revision=HOSTILE, engine_args=args
    )
    env = {"PYTHONPATH": PROBE, "PROBE_DIR": PROBE, "HOSTILE_ENV": HOSTILE, "PCT": "%n%%", "EMPTY": ""}
    gpus = GpuSpec("H100-80GB", 2)
    host = Host(spare.name, spare.address, SshSettings(), gpus, DriverSpec(), engine, {"env": env})
    secrets = {"hf_token": SecretRef("hf_token", env="HF_TOKEN")}
    inv = Inventory("inv.yml", {spare.name: host}, {}, {model.name: model}, secrets)
    replica = Replica(0, 8999, (1, 0))
    ctx = HostContext(inv, host, {model.name: ModelPlan(args, (replica,))}, {"hf_token": HOSTILE + "-token"})
    unit, env_text = render_unit(ctx, model, replica), render_env(ctx, model)
    cluster = ClusterSpec("quoting-probe", (spare.name, "other"), None)
    ray_env = {**env, "PROBE_OUT": "ray.json"}
    ray_unit = render_ray_unit(
        cluster, engine, spare.name, {spare.name: spare.address, "other": "x"}, 0, ray_env
    )
    name, venv = desired.unit_name(model.name, 0), desired.venv_path(engine)
    python, package = f"{venv}/bin/python", f"{PROBE}/vllm/entrypoints/openai"
    setup = (
        f"sudo mkdir -p {shlex.quote(package)} {shlex.quote(venv)}/bin /etc/vllmctl {desired.HOME_DIR} "
        f"{RAY_DIR} && sudo chmod 0777 {PROBE} && sudo touch {PROBE}/vllm/__init__.py "
        f"{PROBE}/vllm/entrypoints/__init__.py {package}/__init__.py && "
        f"sudo ln -sfn /usr/bin/python3 {shlex.quote(python)} && "
        f"(id -u vllm >/dev/null 2>&1 || sudo useradd --system --no-create-home vllm)"
    )
    _sh(lab_fleet, spare, setup)
    ray_name = ray_unit_name(cluster.group)
    try:
        _sh(lab_fleet, spare, f"sudo tee {package}/api_server.py >/dev/null", DUMP)
        _sh(lab_fleet, spare, f"sudo tee {venv}/bin/ray >/dev/null && sudo chmod 0755 {venv}/bin/ray", RAY)
        env_path = desired.env_path(model.name)
        _sh(lab_fleet, spare, f"sudo tee {env_path} >/dev/null && sudo chmod 0600 {env_path}", env_text)
        seen, journal = _run_unit(lab_fleet, spare, name, unit, "out.json")
        ray_seen, ray_journal = _run_unit(lab_fleet, spare, ray_name, ray_unit, "ray.json")
    finally:
        _sh(
            lab_fleet,
            spare,
            f"sudo systemctl stop {name} {ray_name}; sudo rm -rf /etc/systemd/system/{name} "
            f"/etc/systemd/system/{ray_name} {desired.env_path(model.name)} {PROBE} {shlex.quote(venv)}; "
            "sudo systemctl daemon-reload",
        )
    intended = desired.exec_argv(model, engine, ctx.plan(model), replica)
    assert intended[:3] == [python, "-m", "vllm.entrypoints.openai.api_server"]
    assert seen["argv"] == intended[3:]  # every word as rendered, none split, joined or expanded
    assert seen["argv"][seen["argv"].index("--tokenizer") + 1] == HOSTILE
    for key, value in {**env, "HF_TOKEN": HOSTILE + "-token", "CUDA_VISIBLE_DEVICES": "1,0"}.items():
        assert seen["env"][key] == value, key
    # a Ray unit's Environment= values reach Ray as written: `$` is not doubled (systemd expands none there)
    for key, value in ray_env.items():
        assert ray_seen["env"][key] == value, key
    assert ray_seen["argv"][:2] == ["start", "--block"]
    for said in (journal, ray_journal):
        assert "Ignoring invalid environment" not in said and "Invalid" not in said


RAY = "#!/usr/bin/python3\n" + DUMP


def _vllmctl(state: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(state)}
    result = subprocess.run(
        [sys.executable, "-m", "vllmctl", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    try:
        doc = json.loads(result.stdout) if result.stdout.strip() else {}
    except json.JSONDecodeError:
        doc = {}
    return result.returncode, doc, result.stdout + result.stderr


def _apply_argv(staging: dict[str, Any], spare: LabHostInfo) -> tuple[str, ...]:
    return ("apply", str(staging["inventory"]), "--playbook", str(staging["playbook"]), "--limit", spare.name)


@pytest.fixture
def staging(lab_fleet: LabFleet, spare: LabHostInfo, tmp_path: Path) -> Iterator[dict[str, Any]]:
    model = Path(f"/var/tmp/vllmctl-lab-hostile-{os.getpid()}/model")
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "old.bin").write_text("old")
    doc = yaml.safe_load(lab_fleet.inventory.read_text())
    doc.pop("secrets", None)
    doc["models"] = {"probe": {"source": str(model), "hosts": [spare.name], "port": 8998}}
    inventory = tmp_path / "hostile.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    playbook = tmp_path / "staging.yml"
    phase = {"name": "models", "tasks": [{"task": "model_staging"}]}
    playbook.write_text(yaml.safe_dump({"name": "staging", "phases": [phase]}))
    try:
        yield {"model": model, "inventory": inventory, "playbook": playbook, "state": tmp_path}
    finally:
        shutil.rmtree(model.parent, ignore_errors=True)
        _sh(
            lab_fleet, spare, f"sudo rm -rf {shlex.quote(str(model.parent))} /etc/vllmctl-canary /root/canary"
        )


def test_a_hostile_manifest_entry_deletes_nothing_on_a_real_host(
    lab_fleet: LabFleet, spare: LabHostInfo, staging: dict[str, Any]
) -> None:
    dest = shlex.quote(str(staging["model"]))
    _sh(lab_fleet, spare, f"sudo install -d -m 0750 {dest}")  # an existing directory vllmctl did not make
    apply = (
        "apply",
        str(staging["inventory"]),
        "--playbook",
        str(staging["playbook"]),
        "--limit",
        spare.name,
    )
    code, doc, output = _vllmctl(staging["state"], *apply)
    assert code == 0, output[-3000:]
    assert _sh(lab_fleet, spare, f"stat -c %a {dest}").strip() == "750"

    record = "e" * 64 + "  6  "
    hostile = f"{record}../../../../etc/vllmctl-canary\n{record}/root/canary\n{record}link/vllmctl-canary\n"
    _sh(
        lab_fleet,
        spare,
        "echo precious | sudo tee /etc/vllmctl-canary /root/canary >/dev/null && "
        f"sudo ln -sfn /etc {dest}/link && sudo tee -a {dest}/.vllmctl-manifest >/dev/null",
        hostile,
    )
    (staging["model"] / "old.bin").unlink()
    code, doc, output = _vllmctl(staging["state"], *apply)
    assert code == 0, output[-3000:]
    assert _sh(lab_fleet, spare, "sudo cat /etc/vllmctl-canary /root/canary").split() == ["precious"] * 2
    assert lab_fleet.ssh(spare, f"test -e {dest}/old.bin").returncode == 1  # the real stale file went
    (sync,) = [s for s in doc["hosts"][spare.name]["steps"] if s["op"] == "model_sync"]
    assert len(sync["warnings"]) == 2 and "never deleted" in sync["warnings"][0]
    assert "/root/canary" in output and "ignored, never deleted" in output
    code, doc, output = _vllmctl(staging["state"], *apply)
    assert code == 0 and doc["hosts"][spare.name]["recap"]["changed"] == 0, output[-3000:]
    assert _sh(lab_fleet, spare, f"stat -c %a {dest}").strip() == "750"


def test_a_model_folder_linking_out_is_refused_before_any_host_is_touched(
    lab_fleet: LabFleet, spare: LabHostInfo, staging: dict[str, Any]
) -> None:
    (staging["model"] / "tokenizer.json").symlink_to(lab_fleet.identity_file)
    apply = (
        "apply",
        str(staging["inventory"]),
        "--playbook",
        str(staging["playbook"]),
        "--limit",
        spare.name,
    )
    code, _, output = _vllmctl(staging["state"], *apply)
    assert code == 2, output[-3000:]
    assert "tokenizer.json is a symlink to" in output and "outside the model directory" in output
    assert lab_fleet.ssh(spare, f"test -e {shlex.quote(str(staging['model']))}").returncode == 1


def test_a_link_planted_in_the_destination_cannot_redirect_a_push(
    lab_fleet: LabFleet, spare: LabHostInfo, staging: dict[str, Any]
) -> None:
    dest = shlex.quote(str(staging["model"]))
    (staging["model"] / "conf.d").mkdir()
    (staging["model"] / "conf.d" / "vllmctl-pwn.conf").write_text("planted")
    _sh(lab_fleet, spare, f"sudo install -d -m 0755 {dest} && sudo ln -sfn /etc {dest}/conf.d")
    code, _, output = _vllmctl(staging["state"], *_apply_argv(staging, spare))
    assert code == 1 and "resolves outside" in output, output[-3000:]
    assert lab_fleet.ssh(spare, "test -e /etc/vllmctl-pwn.conf").returncode == 1
