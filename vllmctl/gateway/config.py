"""haproxy.cfg for a gateway, pure: one frontend per model and every replica of it across the fleet as a
server of its backend; the API-key pattern files and the TLS bundle it reads beside it."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vllmctl.inventory.model import GatewaySpec, Inventory, ModelDeployment
from vllmctl.paths import HAPROXY_ADMIN_SOCKET, HAPROXY_FILES_DIR, HAPROXY_STATE_FILE
from vllmctl.render.quoting import confined_path, path_component
from vllmctl.render.templates import render_template

# (host, model) -> the replica ports that model listens on there
ReplicaPorts = Callable[[str, ModelDeployment], tuple[int, ...]]

TLS_PEM = f"{HAPROXY_FILES_DIR}/gateway.pem"


@dataclass(frozen=True)
class Server:
    """One replica as the gateway sees it: `backend/name` in the runtime API."""

    backend: str
    name: str
    host: str
    address: str
    port: int

    @property
    def ref(self) -> str:
        return f"{self.backend}/{self.name}"


def server_name(host: str, port: int) -> str:
    return f"{host}-{port}"


def server_address(address: str) -> str:
    """A replica's address as HAProxy reads `<address>:<port>`: an IPv6 address in brackets (bare, HAProxy
    takes what follows its last colon as the port), a name or an IPv4 address as it is."""
    bare = address.removeprefix("[").removesuffix("]")
    try:
        parsed = ipaddress.ip_address(bare)
    except ValueError:
        return address
    return f"[{bare}]" if parsed.version == 6 else bare


def keys_path(model: str) -> str:
    return confined_path(HAPROXY_FILES_DIR, path_component(f"{model}.keys"))


def servers(inventory: Inventory, ports: ReplicaPorts) -> list[Server]:
    """Every replica behind the gateway, by model in the gateway's order, then host in inventory order."""
    gateway = inventory.gateway
    if gateway is None:
        return []
    found = []
    for name in gateway.ports:
        model = inventory.models[name]
        for host in model.hosts:
            address = inventory.hosts[host].address
            found += [
                Server(name, server_name(host, port), host, address, port) for port in ports(host, model)
            ]
    return found


def key_files(gateway: GatewaySpec, api_keys: Mapping[str, str]) -> dict[str, str]:
    """path -> content of each model's accepted `Authorization` values (HAProxy reads one per line)."""
    if not gateway.check_api_key:
        return {}
    return {keys_path(model): f"Bearer {api_keys[model]}\n" for model in gateway.ports if model in api_keys}


# HAProxy times a check out after `inter` unless told otherwise: vLLM answers /health on the event loop that
# serves completions, and a replica busy with a burst (or a CPU-starved host) may answer a 1 s interval's
# check late, be marked DOWN and shed its load onto the others. A check gets at least CHECK_TIMEOUT_MIN_S.
CHECK_TIMEOUT_MIN_S = 5.0


def check_timeout_ms(check_interval_s: float) -> int:
    return round(max(CHECK_TIMEOUT_MIN_S, 2 * check_interval_s) * 1000)


def render_config(inventory: Inventory, ports: ReplicaPorts) -> str:
    gateway = inventory.gateway
    assert gateway is not None
    found = servers(inventory, ports)
    models = [
        {
            "name": name,
            "port": port,
            "keys_file": keys_path(name) if gateway.check_api_key else "",
            "balance": gateway.balance_of(name),
            "servers": [
                {"name": s.name, "address": server_address(s.address), "port": s.port}
                for s in found
                if s.backend == name
            ],
        }
        for name, port in gateway.ports.items()
    ]
    context = {
        "address": gateway.address,
        "admin_socket": HAPROXY_ADMIN_SOCKET,
        "state_file": HAPROXY_STATE_FILE,
        "check_interval_ms": round(gateway.check_interval_s * 1000),
        "check_timeout_ms": check_timeout_ms(gateway.check_interval_s),
        "tls_pem": TLS_PEM if gateway.tls else "",
        "metrics_port": gateway.metrics_port or 0,
        "hash_balance_factor": gateway.hash_balance_factor,
        "prefix_bytes": gateway.prefix_bytes,
        "session_header": gateway.session_header,
        "models": models,
    }
    return render_template("haproxy.cfg.j2", context)
