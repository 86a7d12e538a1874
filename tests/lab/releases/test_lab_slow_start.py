"""Rollouts on real engine start times, on the shared deployment behind the gateway with a client streaming
through it: a release whose first engine takes over 300 s to serve (a drop-in's variable holds each engine's
Python at start-up, before vLLM loads, until a moment in time) rolls both hosts in one apply, the second
waiting for the first past --wait-available's 300 s and the first's health wait running past --timeout; a
SIGTERM while a host waits for its turn leaves that host's engine untouched for the rest of the run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gateway_lab import MODEL, Gateway, Stream

from vllmctl.paths import VENVS_DIR

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.rollout_faults]

UNIT = f"vllmctl-{MODEL}-0.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
DROP_IN = f"/etc/systemd/system/{UNIT}.d/lab-hold-start.conf"
# Run by the engine venv's Python at start-up (site.py executes a .pth line that starts with `import`): only a
# process whose environment names the moment waits, so vllmctl's own calls of that Python are not held. An
# ExecStartPre would hold `systemctl start` itself, which is not what a slow engine does.
HOOK = "lab_hold_start.pth"
HOOK_LINE = (
    'import os, time; time.sleep(max(0.0, float(os.environ.get("LAB_HOLD_UNTIL") or 0) - time.time()))\n'
)
SITES = f"{VENVS_DIR}/*/lib/python3*/site-packages"
UNHOLD = f"rm -f {DROP_IN} {SITES}/{HOOK}; systemctl daemon-reload"
HELD_S = 330  # from just before the apply: the first engine to restart serves over 300 s after its start
WAIT_AVAILABLE_S = 300  # --wait-available's default, left as it is
TIMEOUT_S = 240  # --timeout: below the first host's health wait, which must not be cut by it


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    code, _, output = deployment.apply(found.inventory("slow-gw.yml"))
    assert code == 0, output[-6000:]
    found.wait_status("UP", 2, within_s=600)
    try:
        yield found
    finally:
        for host in deployment.engine_hosts:
            found.root(host, UNHOLD)
        # the deployment's own inventory: its engine flags again, and no HAProxy on the gateway host (#31)
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


def started(gateway: Gateway, host: Any) -> str:
    """When systemd last started the host's engine, and that run's invocation: equal means not restarted."""
    return gateway.root(host, f"systemctl show {UNIT} -p ExecMainStartTimestamp -p InvocationID").strip()


def stop_times(gateway: Gateway, host: Any, since: float) -> list[float]:
    text = gateway.root(host, f"journalctl -u {UNIT} -o short-unix --no-pager")
    times = [float(line.split()[0]) for line in text.splitlines() if " systemd[1]: Stopping " in line]
    return [t for t in times if t >= since]


def event(doc: dict[str, Any], host: str, name: str) -> float:
    (found,) = [e["time"] for e in doc["hosts"][host]["rollout"] if e["event"] == name]
    return float(found)


def test_a_sigterm_while_a_host_waits_for_its_turn_never_restarts_that_host(
    gateway: Gateway, tmp_path: Any
) -> None:
    deployment = gateway.deployment
    hosts = {h.name: h for h in deployment.engine_hosts}
    before = {name: started(gateway, h) for name, h in hosts.items()}
    units = {name: gateway.root(h, f"cat {UNIT_FILE}") for name, h in hosts.items()}
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(deployment.state_dir)}
    env["VLLMCTL_TEST_HF_TOKEN"] = deployment.token
    seqs6 = gateway.inventory("seqs6.yml", {"max_num_seqs": 6})
    report = tmp_path / "apply.json"
    waiting = re.compile(rf"^(\S+): services: waiting its turn: {MODEL}: (\S+) is out of service")
    found: list[re.Match[str]] = []
    lines: list[str] = []
    gateway.failures.clear()
    begun = time.time()
    with Stream(gateway), report.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vllmctl", "apply", str(seqs6), "--json", "--health-timeout", "900"],
            stdout=out, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        said = threading.Event()

        def read() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(line)
                match = waiting.match(line)
                if match and not found:
                    found.append(match)
                    said.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert said.wait(600), "".join(lines)[-4000:]
        time.sleep(2)  # a few polls into its wait
        sent = time.time()
        process.send_signal(signal.SIGTERM)
        assert process.wait(900) == 128 + signal.SIGTERM, "".join(lines)[-4000:]
        reader.join(30)
    waiter, mover = found[0][1], found[0][2]
    doc = json.loads(report.read_text())
    assert doc["aborted"] == "interrupted by SIGTERM", doc["aborted"]
    result = doc["hosts"][waiter]
    assert result["status"] == "skipped", result
    assert result["error"].startswith("interrupted by SIGTERM while it waited for its turn; left on release ")
    assert event(doc, waiter, "held") - sent < 5  # it woke and refused at once, not at its peer's return
    assert result["gateway"] is None  # never drained
    # never restarted, in this run or at its end: the same systemd invocation, no stop in its journal, and
    # the units of the release it serves back in place of the ones apply had written
    assert started(gateway, hosts[waiter]) == before[waiter]
    assert stop_times(gateway, hosts[waiter], begun) == []
    assert gateway.root(hosts[waiter], f"cat {UNIT_FILE}") == units[waiter]
    assert started(gateway, hosts[mover]) != before[mover]  # the peer it waited for did restart
    assert gateway.failures == [], gateway.failures[:5]
    gateway.wait_status("UP", 2, within_s=600)


def test_an_engine_that_takes_over_300_s_to_serve_rolls_every_host_in_one_apply(gateway: Gateway) -> None:
    deployment = gateway.deployment
    hosts = {h.name: h for h in deployment.engine_hosts}
    gateway.wait_status("UP", 2, within_s=600)
    until = int(time.time()) + HELD_S
    hook = f"for site in {SITES}; do printf '%s' '{HOOK_LINE}' > \"$site/{HOOK}\"; done"
    drop_in = f"[Service]\nEnvironment=LAB_HOLD_UNTIL={until}\n"
    for host in hosts.values():  # whichever host goes first waits for the moment; the second starts at once
        gateway.root(host, hook)
        gateway.root(host, f"mkdir -p {DROP_IN.rsplit('/', 1)[0]} && printf '{drop_in}' > {DROP_IN}")
        gateway.root(host, "systemctl daemon-reload")
    gateway.failures.clear()
    gateway.served = 0
    try:
        with Stream(gateway):
            slow = gateway.inventory("slow.yml", {"max_num_seqs": 7})
            code, doc, output = deployment.apply(slow, "--timeout", str(TIMEOUT_S), timeout=1800)
            time.sleep(2)
    finally:
        for host in hosts.values():
            gateway.root(host, UNHOLD)
    assert code == 0, output[-6000:]
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 50
    for name in hosts:
        assert doc["hosts"][name]["status"] == "ok", doc["hosts"][name]
        assert doc["hosts"][name]["release"]["status"] == "passed", doc["hosts"][name]["release"]
    first, second = sorted(hosts, key=lambda name: event(doc, name, "out"))
    # the first host's health wait ran past --timeout: its engine could not answer before `until`
    assert until - event(doc, first, "out") > TIMEOUT_S
    # the second host waited for it past --wait-available, and went only once it was back
    assert event(doc, second, "out") - event(doc, first, "out") > WAIT_AVAILABLE_S
    assert event(doc, second, "out") >= event(doc, first, "back")
    assert f"{second}: services: waiting its turn: {MODEL}: {first} is out of service" in output
