"""keepalived.conf for the VIP: priorities by gateway host order, unicast peers, every value quoted; and
`status`'s reading of which host holds the address."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllmctl.errors import VllmctlError
from vllmctl.gateway.keepalived import CHECK_TIMEOUT_S, check_script, priority, render_keepalived
from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    GatewaySpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
    VipSpec,
)
from vllmctl.paths import HAPROXY_ADMIN_SOCKET
from vllmctl.render.quoting import QuotingError, keepalived_word
from vllmctl.runner.status.vip import holds_vip, vip_command, vip_line, vip_view

ADDRESSES = (("a", "10.0.0.1"), ("gw1", "10.0.0.7"), ("gw2", "10.0.0.8"), ("gw3", "10.0.0.9"))


def _inventory(vip: VipSpec | None = None) -> Inventory:
    hosts = {n: Host(n, a, SshSettings(), None, DriverSpec(), EngineSpec()) for n, a in ADDRESSES}
    models = {"tiny": ModelDeployment("tiny", "org/tiny", ("a",), port=8000)}
    spec = GatewaySpec(("gw1", "gw2", "gw3"), {"tiny": 9100}, vip=vip or VipSpec("10.0.0.100", "eth0"))
    return Inventory("inv.yml", hosts, {}, models, gateway=spec)


def test_the_first_gateway_host_has_the_highest_priority_then_each_next_one_less() -> None:
    assert [priority(i) for i in range(4)] == [150, 100, 99, 98]
    first, second = render_keepalived(_inventory(), "gw1"), render_keepalived(_inventory(), "gw2")
    assert "    priority 150\n" in first and "    priority 100\n" in second
    for text in (first, second):
        assert "    state BACKUP\n    interface eth0\n    virtual_router_id 51\n" in text
        assert "    advert_int 1\n" in text
        assert "        10.0.0.100/32 dev eth0\n" in text
        assert 'script "/etc/keepalived/vllmctl-haproxy-answers"\n    timeout 2\n' in text
        assert "    track_script {\n        chk_haproxy\n    }\n" in text
        assert "script_user root\n    enable_script_security\n" in text


def test_each_host_sends_its_adverts_unicast_to_the_other_gateway_hosts() -> None:
    text = render_keepalived(_inventory(VipSpec("10.0.0.100", "ens3", 7)), "gw2")
    assert (
        "    unicast_src_ip 10.0.0.8\n    unicast_peer {\n        10.0.0.7\n        10.0.0.9\n    }\n" in text
    )
    assert "    interface ens3\n    virtual_router_id 7\n" in text


@pytest.mark.parametrize("value", ["eth0 x", "eth0#", "a{b", "a}b", "$x", "eth0!", 'a"b', "a\nb", ""])
def test_a_value_with_no_safe_keepalived_spelling_stops_the_render(value: str) -> None:
    with pytest.raises(QuotingError):
        keepalived_word(value)
    inventory = _inventory()
    assert inventory.gateway is not None
    gateway = replace(inventory.gateway, vip=VipSpec("10.0.0.100", value))
    with pytest.raises(QuotingError):
        render_keepalived(replace(inventory, gateway=gateway), "gw1")


IP_OUTPUT = (
    "2: eth0    inet 10.0.0.8/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
    "2: eth0    inet 10.0.0.100/32 scope global eth0\\       valid_lft forever\n"
)


def test_the_holder_is_the_host_whose_interface_has_the_address() -> None:
    assert holds_vip(IP_OUTPUT, "10.0.0.100")
    assert not holds_vip(IP_OUTPUT, "10.0.0.10") and not holds_vip(IP_OUTPUT.splitlines()[0], "10.0.0.100")
    assert not holds_vip("", "10.0.0.100")
    assert vip_command(VipSpec("10.0.0.100", "eth0")).render() == "ip -4 -o addr show dev eth0"


class FakeRemote:
    def __init__(self, stdout: str, ok: bool = True) -> None:
        self.stdout, self.ok = stdout, ok

    def execute(self, action: object, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(ok=self.ok, stdout=self.stdout, stderr="no such device")

    def close(self) -> None:
        pass


class DeadRemote(FakeRemote):
    def execute(self, action: object, timeout: float) -> SimpleNamespace:
        raise VllmctlError("ssh: connect to host 10.0.0.9 port 22: No route to host")


def test_status_names_the_holder_and_says_when_there_is_not_exactly_one() -> None:
    outputs = {"gw1": FakeRemote(""), "gw2": FakeRemote(IP_OUTPUT), "gw3": FakeRemote("", ok=False)}
    view = vip_view(_inventory(), outputs.__getitem__, 5.0)  # type: ignore[arg-type]
    assert view == {
        "address": "10.0.0.100",
        "interface": "eth0",
        "holders": ["gw2"],
        "hosts": {"gw1": False, "gw2": True, "gw3": "error: no such device"},
    }
    assert vip_line(view) == "gateway VIP 10.0.0.100 on eth0: held by gw2"
    both = {**view, "holders": ["gw1", "gw2"]}
    assert vip_line(both) == "gateway VIP 10.0.0.100 on eth0: held by gw1, gw2 (expected exactly one)"
    assert vip_view(Inventory("inv.yml", {}, {}, {}), outputs.__getitem__, 5.0) == {}  # type: ignore[arg-type]
    outputs["gw3"] = DeadRemote("")
    view = vip_view(_inventory(), outputs.__getitem__, 5.0)  # type: ignore[arg-type]
    assert view["hosts"]["gw3"] == "error: ssh: connect to host 10.0.0.9 port 22: No route to host"


def _check_against(tmp_path: Path, answer: bytes | None) -> tuple[int, float]:
    """Runs the VIP's check script for real against a UNIX socket standing in for HAProxy's admin socket:
    `answer` sent back to `show info`, or (None) a process that accepts and never reads, as a frozen one."""
    tmp_path.mkdir(exist_ok=True)
    socket_path = tmp_path / "admin.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(socket_path))
    server.listen(4)
    held: list[socket.socket] = []

    def serve() -> None:
        conn, _ = server.accept()
        held.append(conn)
        if answer is not None:
            conn.recv(100)
            conn.sendall(answer)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    script = tmp_path / "check"
    script.write_text(check_script().replace(HAPROXY_ADMIN_SOCKET, str(socket_path)))
    started = time.monotonic()
    result = subprocess.run(["sh", str(script)], capture_output=True, timeout=30)
    elapsed = time.monotonic() - started
    server.close()
    return result.returncode, elapsed


@pytest.mark.skipif(shutil.which("socat") is None, reason="needs socat (.ci/run installs it)")
def test_the_vip_check_passes_only_while_haproxy_answers(tmp_path: Path) -> None:
    code, _ = _check_against(tmp_path / "answers", b"Name: HAProxy\nVersion: 2.6.12\nPid: 42\n")
    assert code == 0
    code, elapsed = _check_against(tmp_path / "frozen", None)
    assert code != 0 and elapsed < CHECK_TIMEOUT_S + 1  # keepalived's own timeout would count it failed too
    code, _ = _check_against(tmp_path / "other", b"Unknown command\n")
    assert code != 0
