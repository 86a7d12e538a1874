"""The no-op fast path on real hosts (sshd, sudo, systemd 252): a no-op run over kept facts runs no sudo,
and after each change made behind vllmctl's back, `--check` from the kept facts plans exactly what a run
that reads every fact under sudo (`--fresh-facts`) plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from vllmctl.facts.witness import SETTLE_S
from vllmctl.lab.testing import LabFleet, LabHostInfo

pytestmark = pytest.mark.lab

UNIT = "vllmctl-tiny-0.service"
ENV = "/etc/vllmctl/tiny.env"
DROP_IN = f"/etc/systemd/system/{UNIT}.d"
# what vllmctl runs under sudo: `sudo -n timeout ...`; the test's own sudo commands run other programs
SUDO_RUNS = "sudo journalctl -q --no-pager _COMM=sudo | grep -c 'COMMAND=/usr/bin/timeout' || true"


@pytest.fixture(scope="module")
def lab(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("fact-cache")
    doc = yaml.safe_load(lab_fleet.inventory.read_text())
    hosts = [h.name for h in lab_fleet.hosts[:2]]
    doc["models"] = {"tiny": {"source": "/srv/models/tiny", "hosts": hosts, "port": 8000}}
    doc["hosts"] = {name: doc["hosts"][name] for name in hosts}
    doc["groups"] = {}
    doc.pop("secrets", None)
    inventory = directory / "fleet.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return {"fleet": lab_fleet, "inventory": inventory, "dir": directory, "host": lab_fleet.hosts[0]}


def apply(lab: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any]]:
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "XDG_STATE_HOME": str(lab["dir"]),
        "XDG_CACHE_HOME": str(lab["dir"]),
    }
    argv = [sys.executable, "-m", "vllmctl", "apply", str(lab["inventory"]), "--json", "--playbook", "units"]
    done = subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=300, env=env, check=False)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from apply (rc {done.returncode}): {done.stdout}\n{done.stderr}")


def planned(doc: dict[str, Any]) -> dict[str, list[tuple[str, str, str, str]]]:
    return {
        name: [(s["op"], s["target"], s["status"], "; ".join(s["commands"])) for s in host["steps"]]
        for name, host in doc["hosts"].items()
    }


def sh(lab: dict[str, Any], command: str, host: LabHostInfo | None = None) -> str:
    result = lab["fleet"].ssh(host or lab["host"], command)
    assert result.returncode == 0, result.stderr
    return result.stdout


def converge_and_keep(lab: dict[str, Any]) -> None:
    """Converge, let the files settle, then one no-op run keeps its facts for the next."""
    code, _ = apply(lab, "--yes", "--fresh-facts")
    assert code == 0
    time.sleep(SETTLE_S + 0.5)
    code, doc = apply(lab, "--check")
    assert code == 0, planned(doc)


def test_a_noop_run_over_kept_facts_runs_no_sudo_on_any_host(lab: dict[str, Any]) -> None:
    converge_and_keep(lab)
    before = [int(sh(lab, SUDO_RUNS, host)) for host in lab["fleet"].hosts[:2]]
    code, doc = apply(lab, "--yes")
    assert code == 0 and all(h["recap"]["changed"] == 0 for h in doc["hosts"].values())
    assert [int(sh(lab, SUDO_RUNS, host)) for host in lab["fleet"].hosts[:2]] == before
    assert apply(lab, "--yes", "--fresh-facts")[0] == 0  # the count does see vllmctl's sudo
    assert [int(sh(lab, SUDO_RUNS, host)) for host in lab["fleet"].hosts[:2]] == [n + 1 for n in before]


CHANGES = {
    "env file edited in place, same size": f"printf X | sudo dd of={ENV} bs=1 conv=notrunc status=none",
    "env file mode": f"sudo chmod 0644 {ENV}",
    "unit enabled by hand": f"sudo systemctl enable {UNIT}",
    "unit started by hand": (
        f"sudo mkdir -p {DROP_IN} && printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep 1000\\n'"
        f" | sudo tee {DROP_IN}/sleep.conf >/dev/null && sudo systemctl daemon-reload"
        f" && sudo systemctl start {UNIT}"
    ),
    "applied record written by hand": f"echo 0 | sudo tee /var/lib/vllmctl/state/{UNIT}.applied >/dev/null",
    "service user's shell": "sudo usermod --shell /bin/sh vllm",
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_after_a_change_behind_vllmctls_back_the_kept_facts_plan_what_fresh_facts_plan(
    lab: dict[str, Any], change: str
) -> None:
    converge_and_keep(lab)
    sh(lab, CHANGES[change])
    try:
        cached_code, cached = apply(lab, "--check")
        fresh_code, fresh = apply(lab, "--check", "--fresh-facts")
        assert cached_code == fresh_code == 3
        assert planned(cached) == planned(fresh)
        assert any(s[2] == "planned" for s in planned(cached)[lab["host"].name])
    finally:
        sh(lab, f"sudo systemctl stop {UNIT}; sudo rm -rf {DROP_IN} && sudo systemctl daemon-reload")
        assert apply(lab, "--yes", "--fresh-facts")[0] == 0
