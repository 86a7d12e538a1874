"""`vllmctl rollback` after an apply ended by SIGTERM between a host's restart and its release gate, on the
shared deployment behind the gateway: every host is back on the release its `current` names, a host already
there is left alone, exit 0, and a client streaming through the gateway meanwhile sees no failed request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gateway_lab import MODEL, Gateway, Stream

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.rollout_faults]

UNIT_FILE = f"/etc/systemd/system/vllmctl-{MODEL}-0.service"
NEW_FLAG = "--max-num-seqs 7"


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    code, _, output = deployment.apply(found.inventory("rbi-gw.yml"))
    assert code == 0, output[-6000:]
    try:
        yield found
    finally:
        # the deployment's own inventory has no gateway: its apply takes HAProxy off the host again
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


def running_argv(gateway: Gateway, host: Any) -> str:
    found = gateway.deployment.fleet.ssh(host, "ps -eo args | grep '[e]ntrypoints.openai.api_server'")
    return str(found.stdout or "")


def current_release(gateway: Gateway, host: Any) -> str:
    return gateway.root(host, "readlink /var/lib/vllmctl/releases/current").strip().rsplit("/", 1)[-1]


def test_rollback_after_an_apply_stopped_between_a_restart_and_its_gate(gateway: Gateway) -> None:
    deployment, hosts = gateway.deployment, gateway.deployment.engine_hosts
    gateway.wait_status("UP", 2, within_s=600)
    before = {h.name: current_release(gateway, h) for h in hosts}
    units = {h.name: gateway.root(h, f"cat {UNIT_FILE}") for h in hosts}
    inventory = gateway.inventory("rbi-seqs7.yml", {"max_num_seqs": 7})
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(deployment.state_dir)}
    env["VLLMCTL_TEST_HF_TOKEN"] = deployment.token
    argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--health-timeout", "900"]
    gateway.failures.clear()
    gateway.served = 0
    with Stream(gateway):
        time.sleep(2)
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 600
        while not any(NEW_FLAG in running_argv(gateway, h) for h in hosts):
            assert time.monotonic() < deadline and process.poll() is None, (
                "no engine restarted on the new units"
            )
            time.sleep(0.3)
        process.send_signal(signal.SIGTERM)  # its new engine runs; its health wait and gate are ahead
        out, err = process.communicate(timeout=900)
        assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
        applied = json.loads(out)["hosts"]
        restarted = [h for h in hosts if NEW_FLAG in running_argv(gateway, h)]
        assert restarted, err[-3000:]
        for host in restarted:  # stopped before its gate: ungated units run, `current` never moved
            assert applied[host.name]["error"].startswith("interrupted by SIGTERM before "), applied[
                host.name
            ]
            assert current_release(gateway, host) == before[host.name]

        started = time.monotonic()
        # the engine hosts and the gateway host (no release there); the session's other hosts are others'
        limit = ",".join(h.name for h in (*hosts, gateway.host))
        rolled = gateway.vllmctl("rollback", str(inventory), "--limit", limit, "--yes", "--json")
        took = time.monotonic() - started
        assert rolled.returncode == 0, rolled.stdout[-4000:] + rolled.stderr[-4000:]
        time.sleep(2)
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 10
    back = json.loads(rolled.stdout)
    for host in hosts:
        shown = back[host.name]
        assert (shown["ok"], shown["from"], shown["to"]) == (True, before[host.name], before[host.name]), (
            shown
        )
        assert shown["noop"] == (host not in restarted), shown
        assert current_release(gateway, host) == before[host.name]
        assert gateway.root(host, f"cat {UNIT_FILE}") == units[host.name]
        assert NEW_FLAG not in running_argv(gateway, host)
    assert back[gateway.host.name]["noop"] and back[gateway.host.name]["ok"]  # no release, nothing to do
    print(
        f"rollback took {took:.1f}s for {len(restarted)} restarted host(s); {gateway.served} requests served"
    )
    gateway.wait_status("UP", 2, within_s=600)
