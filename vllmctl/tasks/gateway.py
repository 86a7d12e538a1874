"""Desired state of a gateway host, pure: HAProxy and socat (its runtime API's client) from the
distribution's packages, then its config with every replica of each model across the fleet; with a VIP,
keepalived and its config too (without one, keepalived stopped where it ran). A host vllmctl once made a
gateway host and no longer is gets the VIP and then HAProxy taken off it."""

from __future__ import annotations

from vllmctl.gateway.config import TLS_PEM, key_files, render_config
from vllmctl.gateway.keepalived import check_script, render_keepalived
from vllmctl.inventory.model import ModelDeployment
from vllmctl.tasks.desired import HostContext, OpCall, Params, api_key_secret

PACKAGES = ("haproxy", "socat")
VIP_PACKAGES = ("keepalived",)
# the TLS certificate and key, read on the controller at the edge (never a name a secret can have)
TLS_SECRET = "@gateway-tls"


def gateway_config(ctx: HostContext) -> str:
    def ports(host: str, model: ModelDeployment) -> tuple[int, ...]:
        return tuple(replica.port for replica in ctx.replicas_on(host, model))

    return render_config(ctx.inventory, ports)


def _gateway(ctx: HostContext, params: Params) -> list[OpCall]:
    gateway = ctx.inventory.gateway
    if gateway is None or ctx.host.name not in gateway.hosts:
        # the VIP leaves before HAProxy stops: it must never point at a host that no longer serves
        return [
            OpCall("keepalived_config", {"absent": True, "former_gateway": True}),
            OpCall("gateway_config", {"absent": True}),
        ]
    keys = {}
    for name in gateway.ports:
        secret = api_key_secret(ctx.inventory.models[name].engine_args)
        if secret is not None and secret in ctx.secrets:
            keys[name] = ctx.secrets[secret]
    files = key_files(gateway, keys)
    if gateway.tls is not None and TLS_SECRET in ctx.secrets:
        files[TLS_PEM] = ctx.secrets[TLS_SECRET]
    packages = [*PACKAGES, *(VIP_PACKAGES if gateway.vip else ())]
    calls = [
        OpCall("system_packages", {"names": packages, "why": "the gateway"}),
        OpCall("gateway_config", {"content": gateway_config(ctx), "files": files}),
    ]
    if gateway.vip is not None:
        # after HAProxy's config: the VIP comes to a host whose HAProxy already serves
        content = render_keepalived(ctx.inventory, ctx.host.name)
        calls.append(OpCall("keepalived_config", {"content": content, "check": check_script()}))
    else:  # a VIP removed from the inventory: keepalived must not go on holding the address
        calls.append(OpCall("keepalived_config", {"absent": True}))
    return calls


GATEWAY_TASKS = {"gateway": _gateway}
