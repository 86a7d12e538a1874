"""Which endpoints a fleet serves: one per (host, model, data-parallel replica), at port + replica index;
a multi-node model one per API server of its group: its head's, or every used node's in external data
parallel (listed when any host of the group is).

Pure: the inventory and the replica counts in, endpoints out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllmctl.errors import InputError
from vllmctl.inventory.model import Host, Inventory
from vllmctl.render.quoting import http_url


@dataclass(frozen=True)
class Endpoint:
    host: str
    model: str  # the inventory's model name, which is also the served model name
    replica: int
    base_url: str
    source: str = ""  # where the weights come from; a local directory gives an exact tokenizer
    http: str = "direct"  # "tunnel": base_url is a local port forwarded over SSH (transport/tunnel.py)
    port: int = 0  # the engine's port on its host
    tunnel_overhead_ms: float | None = None  # measured per request when tunnelled (bench reports it)

    @property
    def label(self) -> str:
        """host/model#replica; just the model for an endpoint given by URL (no inventory host)."""
        suffix = f"#{self.replica}" if self.replica else ""
        return f"{self.host}/{self.model}{suffix}" if self.host else self.model

    def local_tokenizer(self) -> Path | None:
        """The model's tokenizer.json when the source is a directory on this machine too (hub ids are not)."""
        if not self.source.startswith("/"):
            return None
        candidate = Path(self.source) / "tokenizer.json"
        return candidate if candidate.is_file() else None


UrlOf = Callable[[Host, int], str]  # a host's port -> the base URL the controller reaches it at


def direct_url(host: Host, port: int) -> str:
    return http_url(host.address, port)


def endpoints_for(
    inventory: Inventory,
    hosts: Sequence[str],
    models: Sequence[str] = (),
    replicas: Mapping[tuple[str, str], int] | None = None,
    url_of: UrlOf = direct_url,
    api_hosts: Mapping[str, Sequence[str]] | None = None,
) -> list[Endpoint]:
    """Endpoints of `hosts` (in that order) for `models` (all when empty); `replicas` maps (host, model)
    to its data-parallel replica count (1 when absent); `url_of` gives the base URL HTTP reaches (direct or
    tunnelled: transport/tunnel.py); `api_hosts` maps a multi-node model to the nodes of its group that run
    an API server (the head alone when absent; every used node in external data parallel)."""
    unknown = [name for name in models if name not in inventory.models]
    if unknown:
        raise InputError(
            f"--model: no model named {', '.join(map(repr, unknown))}",
            f"known: {', '.join(inventory.models)}",
        )
    chosen = [m for m in inventory.models.values() if not models or m.name in models]
    found: list[Endpoint] = []
    grouped: set[str] = set()
    for host_name in hosts:
        host = inventory.hosts[host_name]
        for model in chosen:
            if host_name not in model.host_set:
                continue
            if model.cluster is not None:  # one engine over the group, served by its API servers
                if model.name not in grouped:
                    grouped.add(model.name)
                    for node in (api_hosts or {}).get(model.name) or model.cluster.hosts[:1]:
                        url = url_of(inventory.hosts[node], model.port)
                        found.append(Endpoint(node, model.name, 0, url, model.source, port=model.port))
                continue
            count = max(1, (replicas or {}).get((host_name, model.name), 1))
            for index in range(count):
                url = url_of(host, model.port + index)
                found.append(
                    Endpoint(host_name, model.name, index, url, model.source, port=model.port + index)
                )
    return found


def gateway_endpoints(
    inventory: Inventory, models: Sequence[str] = (), url_of: UrlOf = direct_url
) -> list[Endpoint]:
    """One endpoint per gateway host and model behind it: what clients of the fleet call (docs/gateway.md)."""
    gateway = inventory.gateway
    if gateway is None:
        raise InputError("--gateway: the inventory has no gateway", "add `gateway:` (docs/gateway.md)")
    found = []
    for host in gateway.hosts:
        for name, port in gateway.ports.items():
            if not models or name in models:
                url = url_of(inventory.hosts[host], port)
                if gateway.tls is not None:
                    url = "https://" + url.removeprefix("http://")
                found.append(Endpoint(host, name, 0, url, inventory.models[name].source, port=port))
    return found
