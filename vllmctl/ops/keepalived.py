"""The gateway's virtual IP: keepalived's config compared by hash; a new one is written as a candidate,
checked with `keepalived -t` on the host, and only then switched in and reloaded. With `absent` (a gateway
without a VIP) keepalived is stopped and its config removed, so no host goes on holding the address;
`former_gateway` does the same only where vllmctl had set up a gateway (a host taken out of the gateway)."""

from __future__ import annotations

from vllmctl.ops.base import (
    Action,
    Args,
    FactRequests,
    Facts,
    Operation,
    Step,
    checked_switch,
    keep_running,
    noop,
    run,
    stop_and_disable,
)
from vllmctl.ops.gateway import was_gateway
from vllmctl.paths import HAPROXY_FILES_DIR, KEEPALIVED_CANDIDATE, KEEPALIVED_CONFIG, KEEPALIVED_UNIT

KEEPALIVED_DIR = KEEPALIVED_CONFIG.rsplit("/", 1)[0]


def _facts(args: Args) -> FactRequests:
    return {"paths": (KEEPALIVED_DIR, KEEPALIVED_CONFIG, HAPROXY_FILES_DIR), "services": (KEEPALIVED_UNIT,)}


def _absent(facts: Facts, former_gateway: bool) -> Step:
    if former_gateway and not was_gateway(facts):
        return noop("keepalived_config", KEEPALIVED_CONFIG, "not a gateway host")
    actions = stop_and_disable(KEEPALIVED_UNIT, facts["services"].get(KEEPALIVED_UNIT, {}))
    if facts["paths"].get(KEEPALIVED_CONFIG, {}).get("type", "absent") != "absent":
        actions.append(run("rm", "-f", KEEPALIVED_CONFIG))
    if not actions:
        return noop("keepalived_config", KEEPALIVED_CONFIG, "no VIP: keepalived not running")
    return Step("keepalived_config", KEEPALIVED_CONFIG, tuple(actions))


def _plan(args: Args, facts: Facts) -> Step:
    if args.get("absent"):
        return _absent(facts, bool(args.get("former_gateway")))
    content = str(args["content"])
    current = facts["paths"].get(KEEPALIVED_CONFIG, {"type": "absent"})
    # keepalived >= 2.0 parses the file and exits non-zero on an error: the live one stays
    check = run("keepalived", "-t", "-f", KEEPALIVED_CANDIDATE)
    switch, change = checked_switch(KEEPALIVED_CONFIG, KEEPALIVED_CANDIDATE, content, current, check)
    actions: list[Action] = []
    if change is not None and facts["paths"].get(KEEPALIVED_DIR, {}).get("type") != "directory":
        actions.append(run("install", "-d", "-m", "0755", KEEPALIVED_DIR))
    actions += switch
    reload = [run("systemctl", "reload", KEEPALIVED_UNIT)] if change is not None else []
    actions += keep_running(KEEPALIVED_UNIT, facts["services"].get(KEEPALIVED_UNIT, {}), reload)
    if not actions:
        return noop("keepalived_config", KEEPALIVED_CONFIG, "keepalived runs the gateway's VIP config")
    return Step("keepalived_config", KEEPALIVED_CONFIG, tuple(actions), change=change)


KEEPALIVED_CONFIG_OP = Operation("keepalived_config", _facts, _plan)
