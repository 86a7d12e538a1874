"""haproxy.cfg from the inventory: every replica across the fleet a server, checks, API keys, TLS, metrics;
a value with no safe haproxy.cfg spelling stops the render."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllmctl.gateway.config import key_files, render_config, servers
from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    GatewaySpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
    TlsFiles,
)
from vllmctl.render.quoting import QuotingError, haproxy_word


def _host(name: str, address: str) -> Host:
    return Host(name, address, SshSettings(), None, DriverSpec(), EngineSpec())


def _inventory(**gateway: object) -> Inventory:
    hosts = {n: _host(n, a) for n, a in (("a", "10.0.0.1"), ("b", "10.0.0.2"), ("gw", "10.0.0.9"))}
    models = {"tiny": ModelDeployment("tiny", "org/tiny", ("a", "b"), port=8000)}
    spec = GatewaySpec(("gw",), {"tiny": 9100}, **gateway)  # type: ignore[arg-type]
    return Inventory("inv.yml", hosts, {}, models, gateway=spec)


def two_on_b(host: str, model: ModelDeployment) -> tuple[int, ...]:
    return (8000, 8001) if host == "b" else (8000,)


def test_every_replica_of_the_model_across_the_fleet_is_a_server() -> None:
    found = [(s.ref, s.address, s.port) for s in servers(_inventory(), two_on_b)]
    assert found == [
        ("tiny/a-8000", "10.0.0.1", 8000),
        ("tiny/b-8000", "10.0.0.2", 8000),
        ("tiny/b-8001", "10.0.0.2", 8001),
    ]
    text = render_config(_inventory(check_interval_s=0.5), two_on_b)
    assert "    bind 0.0.0.0:9100\n" in text
    assert "    balance leastconn\n    option httpchk GET /health\n" in text
    assert "default-server check inter 500 fall 2 rise 2" in text
    # a late /health (a busy or CPU-starved replica) is not a failed check: 5 s at least, not `inter`
    assert "    timeout check 5000\n" in text
    assert "    timeout check 16000\n" in render_config(_inventory(check_interval_s=8), two_on_b)
    assert "    server b-8001 10.0.0.2:8001\n" in text
    assert "stats socket /run/haproxy/admin.sock mode 600 level admin expose-fd listeners" in text
    assert "prometheus" not in text and "acl authorized" not in text and " ssl " not in text


def test_an_ipv6_replica_is_written_in_brackets() -> None:
    inventory = _inventory()
    hosts = {**inventory.hosts, "a": _host("a", "fd00::11"), "b": _host("b", "[fd00::12]")}
    text = render_config(replace(inventory, hosts=hosts), two_on_b)
    assert (
        "    server a-8000 [fd00::11]:8000\n" in text
    )  # bare, `fd00::11:8000` leaves the end of the address to a guess
    assert "    server b-8001 [fd00::12]:8001\n" in text


def test_api_keys_tls_and_metrics() -> None:
    inventory = _inventory(check_api_key=True, tls=TlsFiles("/c.pem", "/k.pem"), metrics_port=8405)
    text = render_config(inventory, two_on_b)
    assert "    bind 0.0.0.0:9100 ssl crt /etc/haproxy/vllmctl/gateway.pem\n" in text
    assert "acl authorized req.hdr(authorization) -m str -f /etc/haproxy/vllmctl/tiny.keys" in text
    assert "http-request deny deny_status 401 if !authorized" in text
    assert "bind 0.0.0.0:8405\n    http-request use-service prometheus-exporter if { path /metrics }" in text
    assert inventory.gateway is not None
    assert key_files(inventory.gateway, {"tiny": "s3cret"}) == {
        "/etc/haproxy/vllmctl/tiny.keys": "Bearer s3cret\n"
    }
    assert key_files(replace(inventory.gateway, check_api_key=False), {"tiny": "s3cret"}) == {}


@pytest.mark.parametrize("value", ["a b", "x#y", 'q"', "$HOME", "a\nb", "", "back\\slash"])
def test_a_word_haproxy_would_read_differently_is_refused(value: str) -> None:
    with pytest.raises(QuotingError):
        haproxy_word(value)


def test_an_unsafe_address_stops_the_render() -> None:
    inventory = _inventory()
    hosts = {**inventory.hosts, "a": _host("a", "10.0.0.1 backup")}
    with pytest.raises(QuotingError):
        render_config(replace(inventory, hosts=hosts), two_on_b)


def test_bench_can_target_each_model_through_the_gateway() -> None:
    from vllmctl.bench.endpoints import gateway_endpoints
    from vllmctl.errors import InputError

    found = gateway_endpoints(_inventory())
    assert [(e.host, e.model, e.base_url) for e in found] == [("gw", "tiny", "http://10.0.0.9:9100")]
    tls = gateway_endpoints(_inventory(tls=TlsFiles("/c", "/k")))
    assert tls[0].base_url == "https://10.0.0.9:9100"
    assert gateway_endpoints(_inventory(), ["other"]) == []
    with pytest.raises(InputError):
        gateway_endpoints(replace(_inventory(), gateway=None))


def test_prefix_routing_hashes_the_session_or_the_prompts_start_with_bounded_loads() -> None:
    inventory = _inventory(balance={"tiny": "prefix"}, hash_balance_factor=150, prefix_bytes=64)
    text = render_config(inventory, two_on_b)
    backend = text[text.index("\nbackend tiny") + 1 :]
    assert backend.splitlines()[:4] == [
        "backend tiny",
        "    balance hash var(txn.affinity)",
        "    hash-type consistent",
        "    hash-balance-factor 150",
    ]
    frontend = text[text.index("frontend tiny") : text.index("\nbackend tiny")]
    assert "option http-buffer-request" in frontend
    rules = [
        line.strip() for line in frontend.splitlines() if line.strip().startswith("http-request set-var")
    ]
    assert rules == [
        "http-request set-var(txn.affinity) req.hdr(x-session-id) if { req.hdr(x-session-id) -m found }",
        "http-request set-var(txn.affinity) req.body,json_query('$.messages[0].content'),bytes(0,64) "
        "if !{ var(txn.affinity) -m found }",
        "http-request set-var(txn.turn) req.body,json_query('$.messages[1].content'),bytes(0,64) "
        "if !{ req.hdr(x-session-id) -m found } { req.body,json_query('$.messages[0].role') -m str system "
        "developer }",
        "http-request set-var(txn.affinity) var(txn.affinity),concat(,txn.turn,) "
        "if { var(txn.affinity) -m found } { var(txn.turn) -m found }",
        "http-request set-var(txn.affinity) req.body,json_query('$.prompt'),bytes(0,64) "
        "if !{ var(txn.affinity) -m found }",
    ]


def test_leastconn_stays_the_default_and_modes_mix_per_model() -> None:
    assert "balance hash" not in render_config(_inventory(), two_on_b)
    hosts = {n: _host(n, a) for n, a in (("a", "10.0.0.1"), ("gw", "10.0.0.9"))}
    models = {m: ModelDeployment(m, f"org/{m}", ("a",), port=p) for m, p in (("chat", 8000), ("embed", 8001))}
    spec = GatewaySpec(("gw",), {"chat": 9100, "embed": 9101}, balance={"chat": "prefix"})
    text = render_config(Inventory("inv.yml", hosts, {}, models, gateway=spec), lambda h, m: (m.port,))
    chat, embed = text[text.index("\nbackend chat") :], text[text.index("\nbackend embed") :]
    assert "balance hash var(txn.affinity)" in chat.split("frontend")[0]
    assert "balance leastconn" in embed and "http-buffer-request" not in text[text.index("frontend embed") :]


def test_a_session_header_with_no_safe_spelling_stops_the_render() -> None:
    with pytest.raises(QuotingError):
        render_config(_inventory(balance={"tiny": "prefix"}, session_header="x id{"), two_on_b)
