"""The gateway's virtual IP on real lab hosts: its own three-host fleet, the lab's vLLM stand-in on the first
host, HAProxy and keepalived (Debian's packages) on the other two, the VIP an unused address of the lab
subnet. A client streams completions through the VIP while the active gateway's HAProxy is stopped, then
frozen (SIGSTOP: still `active` to systemd), and later while that host is powered off: the VIP moves to the
other gateway host within its bound, and no request that started after the move fails (only those on the old
path may). The fleet is always torn down."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.lab.testing import LabFleet, LabHostInfo, power_off, start_fleet, stop_fleet

pytestmark = pytest.mark.lab

MODEL = "tiny"
PORT = 9100
INTERFACE = "eth0"  # each lab host's veth end in its network namespace (lab/network.py)
VIP_OCTET = 200  # lab hosts are .11, .12, ...: .200 is free in a three-host fleet
# keepalived 2.2.7 in two network namespaces (docs/gateway.md): 2.3 s after the check starts failing (two
# failed checks a second apart, then the backup takes over at once), 3.1 s after a host dies (three missed
# adverts plus skew), 5.3 s for the first host to take it back (two good checks, then it preempts); this
# test on the lab: 2.3 s, 2.9 s and 5.2 s
FAILOVER_BOUND_S = 8.0
# a frozen HAProxy: two checks that each run into their 2 s timeout, a second apart, then the takeover
FROZEN_BOUND_S = 10.0
RETURN_BOUND_S = 15.0


@dataclass
class Request:
    started: float
    ended: float
    error: str = ""


@dataclass
class Vip:
    fleet: LabFleet
    inventory: Path
    state: Path
    address: str
    requests: list[Request] = field(default_factory=list)

    @property
    def gateways(self) -> tuple[LabHostInfo, ...]:
        return self.fleet.hosts[1:]

    def vllmctl(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250", "XDG_STATE_HOME": str(self.state)}
        argv = [sys.executable, "-m", "vllmctl", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def sh(self, host: LabHostInfo, command: str) -> str:
        result = self.fleet.ssh(host, command, timeout=60)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout

    def holds(self, host: LabHostInfo) -> bool:
        found = self.fleet.ssh(host, f"ip -4 -o addr show dev {INTERFACE}", timeout=5)
        return found.returncode == 0 and f" {self.address}/" in found.stdout

    def wait_holder(self, host: LabHostInfo, since: float, within_s: float) -> float:
        """Seconds from `since` until `host` holds the VIP."""
        while time.monotonic() - since < within_s:
            if self.holds(host):
                return time.monotonic() - since
            time.sleep(0.1)
        raise AssertionError(f"{host.name} does not hold {self.address} {within_s}s after the fault")

    def complete(self, client: httpx.Client) -> None:
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 8, "stream": True}
        started = time.monotonic()
        error = ""
        try:
            url = f"http://{self.address}:{PORT}/v1/completions"
            with client.stream("POST", url, json=body, timeout=httpx.Timeout(10, connect=3)) as reply:
                text = "".join(reply.iter_text())
            if reply.status_code != 200 or "[DONE]" not in text:
                error = f"status {reply.status_code}: {text[-200:]}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        self.requests.append(Request(started, time.monotonic(), error))

    def served_since(self, since: float) -> int:
        return sum(1 for r in self.requests if r.started >= since and not r.error)

    def wait_served(self, since: float, count: int, within_s: float) -> None:
        deadline = time.monotonic() + within_s
        while self.served_since(since) < count:
            assert time.monotonic() < deadline, (
                f"{self.served_since(since)} of {count} served: {self.requests[-3:]}"
            )
            time.sleep(0.2)

    def failed_after(self, moved_at: float) -> list[Request]:
        return [r for r in self.requests if r.error and r.started >= moved_at]


class Stream:
    """A client sending streamed completions through the VIP, a new connection each, until stopped."""

    def __init__(self, vip: Vip, pause_s: float = 0.1) -> None:
        self.vip, self.stop, self.pause_s = vip, threading.Event(), pause_s
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(self.pause_s):
            with httpx.Client(trust_env=False) as client:
                self.vip.complete(client)

    def __enter__(self) -> Stream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def vip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vip]:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    name = f"pt{os.getpid()}-vip"
    work = tmp_path_factory.mktemp("vip")
    model_dir = Path(f"/var/tmp/vllmctl-vip-{os.getpid()}/tiny")
    try:
        fleet = start_fleet(name, 3, work / "lab.yml")
        version, _ = ensure_standin_wheel(fleet.directory / "wheels")
        shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
        doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
        engine = {"name": "vllm", "package": PACKAGE, "version": version, "index_url": fleet.index_url}
        doc["defaults"]["engine"] = engine
        engine_host, *gateways = [h.name for h in fleet.hosts]
        # the stand-in starts only with the Ray backend; without a Ray cluster in its env it serves alone
        args = {"distributed_executor_backend": "ray"}
        doc["models"] = {
            MODEL: {"source": str(model_dir), "hosts": engine_host, "port": 8000, "engine_args": args}
        }
        address = str(ipaddress.ip_network(fleet.cidr)[VIP_OCTET])
        doc["gateway"] = {
            "hosts": gateways,
            "models": {MODEL: {"port": PORT}},
            "check_interval_s": 1,
            "vip": {"address": address, "interface": INTERFACE},
        }
        inventory = work / "vip.yml"
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        yield Vip(fleet, inventory, work, address)
    finally:
        stop_fleet(name)
        shutil.rmtree(model_dir.parent, ignore_errors=True)


def test_apply_puts_the_vip_on_the_first_gateway_host_and_status_shows_it(vip: Vip) -> None:
    checked = vip.vllmctl("validate", str(vip.inventory))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    applied = vip.vllmctl("apply", str(vip.inventory), "--json", "--health-timeout", "300")
    assert applied.returncode == 0, applied.stdout[-5000:] + applied.stderr[-3000:]
    first, second = vip.gateways
    for host in vip.gateways:
        steps = json.loads(applied.stdout)["hosts"][host.name]["steps"]
        assert any(s["op"] == "keepalived_config" and s["status"] == "changed" for s in steps), steps
        assert vip.sh(host, "systemctl is-active keepalived.service").strip() == "active"
    vip.wait_holder(first, time.monotonic(), within_s=15)
    assert not vip.holds(second)
    shown = vip.vllmctl("status", str(vip.inventory), "--json", timeout=120)
    assert json.loads(shown.stdout)["gateway_vip"]["holders"] == [first.name], shown.stdout[-3000:]
    with httpx.Client(trust_env=False) as client:
        for _ in range(5):
            vip.complete(client)
    assert [r.error for r in vip.requests] == [""] * 5
    again = vip.vllmctl("apply", str(vip.inventory), "--check", "--json")
    top = {k: v for k, v in json.loads(again.stdout or "{}").items() if k != "hosts"}
    assert again.returncode == 0, f"{top}\n{again.stderr[-3000:]}"
    assert all(h["recap"]["changed"] == 0 for h in json.loads(again.stdout)["hosts"].values())


def test_the_vip_moves_when_haproxy_stops_and_comes_back_with_it(vip: Vip) -> None:
    first, second = vip.gateways
    vip.requests.clear()
    with Stream(vip):
        time.sleep(3)
        stopped = time.monotonic()
        vip.sh(first, "sudo systemctl stop haproxy.service")
        moved_s = vip.wait_holder(second, stopped, FAILOVER_BOUND_S)
        time.sleep(5)
        assert not vip.holds(first)
        failed = vip.failed_after(stopped + moved_s)
        print(f"HAProxy stopped: the VIP moved in {moved_s:.2f} s; {len(vip.requests)} requests")
        assert failed == [], failed
        vip.sh(first, "sudo systemctl start haproxy.service")
        back_s = vip.wait_holder(first, time.monotonic(), RETURN_BOUND_S)
        print(f"HAProxy back: the VIP returned in {back_s:.2f} s")
        back_at = time.monotonic()
        # a request on the old path when the VIP moved back hangs until its read timeout; the stream is
        # sequential, so wait for the requests after it rather than for a fixed time
        vip.wait_served(since=back_at, count=10, within_s=30)
    assert vip.failed_after(back_at) == []


def test_the_vip_moves_when_haproxy_is_frozen_and_comes_back_when_it_answers(vip: Vip) -> None:
    """SIGSTOP: systemd still calls HAProxy active but it answers nothing; the check asks its admin socket."""
    first, second = vip.gateways
    assert vip.holds(first)
    vip.requests.clear()
    with Stream(vip):
        time.sleep(3)
        frozen = time.monotonic()
        vip.sh(first, "sudo pkill -STOP -x haproxy")
        try:
            moved_s = vip.wait_holder(second, frozen, FROZEN_BOUND_S)
            print(f"HAProxy frozen: the VIP moved in {moved_s:.2f} s")
            moved_at = frozen + moved_s
            # a request on the frozen path hangs until its read timeout: count those sent after the move
            vip.wait_served(since=moved_at, count=20, within_s=40)
            failed = vip.failed_after(moved_at)
        finally:
            vip.sh(first, "sudo pkill -CONT -x haproxy")
        back_s = vip.wait_holder(first, time.monotonic(), RETURN_BOUND_S)
        print(f"HAProxy answering again: the VIP returned in {back_s:.2f} s")
        back_at = time.monotonic()
        vip.wait_served(since=back_at, count=10, within_s=30)
    assert failed == [], failed
    assert vip.failed_after(back_at) == []


def test_the_vip_moves_when_the_active_gateway_host_is_powered_off(vip: Vip) -> None:
    first, second = vip.gateways
    assert vip.holds(first)
    vip.requests.clear()
    with Stream(vip):
        time.sleep(3)
        killed = time.monotonic()
        power_off(vip.fleet, first)
        moved_s = vip.wait_holder(second, killed, FAILOVER_BOUND_S)
        print(f"host powered off: the VIP moved in {moved_s:.2f} s")
        moved_at = killed + moved_s
        vip.wait_served(since=moved_at, count=20, within_s=40)
    assert vip.failed_after(moved_at) == [], vip.failed_after(moved_at)
    shown = vip.vllmctl("status", str(vip.inventory), "--json", timeout=180)
    view = json.loads(shown.stdout)["gateway_vip"]
    assert view["holders"] == [second.name] and str(view["hosts"][first.name]).startswith("error")


def test_removing_the_vip_stops_keepalived_and_no_host_holds_the_address(vip: Vip) -> None:
    _, second = vip.gateways  # the first is powered off by the test before
    assert vip.holds(second)
    doc = yaml.safe_load(vip.inventory.read_text())
    # the operator drops the VIP and the dead gateway host (the gateway's gate checks every gateway host)
    del doc["gateway"]["vip"]
    doc["gateway"]["hosts"] = [second.name]
    without = vip.inventory.with_name("no-vip.yml")
    without.write_text(yaml.safe_dump(doc, sort_keys=False))
    applied = vip.vllmctl("apply", str(without), "--json", "--limit", second.name, "--health-timeout", "300")
    assert applied.returncode == 0, applied.stdout[-5000:] + applied.stderr[-3000:]
    steps = json.loads(applied.stdout)["hosts"][second.name]["steps"]
    assert any(s["op"] == "keepalived_config" and s["status"] == "changed" for s in steps), steps
    assert vip.sh(second, "systemctl is-active keepalived.service || true").strip() == "inactive"
    gone = "test -e /etc/keepalived/keepalived.conf && echo kept || echo gone"
    assert vip.sh(second, gone).strip() == "gone"
    assert not vip.holds(second)  # keepalived gives the address up as it stops
    again = vip.vllmctl("apply", str(without), "--check", "--json", "--limit", second.name)
    assert again.returncode == 0, again.stdout[-3000:]
    assert json.loads(again.stdout)["hosts"][second.name]["recap"]["changed"] == 0
