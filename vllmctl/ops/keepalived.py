"""The gateway's virtual IP: keepalived's config compared by hash; a new one is written as a candidate,
checked with `keepalived -t` on the host, and only then switched in and reloaded. With `absent` (a gateway
without a VIP) keepalived is stopped and its config removed, so no host goes on holding the address;
`former_gateway` does the same only where vllmctl had set up a gateway (a host taken out of the gateway).
The check script it runs (`check`) is uploaded before the config that names it."""

from __future__ import annotations

from vllmctl.ops.base import (
    Action,
    Args,
    FactRequests,
    Facts,
    Operation,
    Step,
    Upload,
    checked_switch,
    keep_running,
    noop,
    run,
    sha256_text,
    stop_and_disable,
)
from vllmctl.ops.gateway import was_gateway
from vllmctl.paths import (
    HAPROXY_FILES_DIR,
    KEEPALIVED_CANDIDATE,
    KEEPALIVED_CHECK,
    KEEPALIVED_CONFIG,
    KEEPALIVED_UNIT,
)

KEEPALIVED_DIR = KEEPALIVED_CONFIG.rsplit("/", 1)[0]


def _facts(args: Args) -> FactRequests:
    paths = (KEEPALIVED_DIR, KEEPALIVED_CONFIG, KEEPALIVED_CHECK, HAPROXY_FILES_DIR)
    return {"paths": paths, "services": (KEEPALIVED_UNIT,)}


def _absent(facts: Facts, former_gateway: bool) -> Step:
    if former_gateway and not was_gateway(facts):
        return noop("keepalived_config", KEEPALIVED_CONFIG, "not a gateway host")
    actions = stop_and_disable(KEEPALIVED_UNIT, facts["services"].get(KEEPALIVED_UNIT, {}))
    present = [p for p in (KEEPALIVED_CONFIG, KEEPALIVED_CHECK) if facts["paths"].get(p, {}).get("type")]
    if any(facts["paths"][p]["type"] != "absent" for p in present):
        actions.append(run("rm", "-f", KEEPALIVED_CONFIG, KEEPALIVED_CHECK))
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
    script = str(args.get("check", ""))
    found = facts["paths"].get(KEEPALIVED_CHECK, {})
    stale = bool(script) and (found.get("sha256") != sha256_text(script) or found.get("mode") != "0755")
    if (change is not None or stale) and facts["paths"].get(KEEPALIVED_DIR, {}).get("type") != "directory":
        actions.append(run("install", "-d", "-m", "0755", KEEPALIVED_DIR))
    if stale:  # before the config that names it: keepalived refuses a script it cannot run
        actions.append(Upload(KEEPALIVED_CHECK, script, mode="0755"))
    actions += switch
    reload = [run("systemctl", "reload", KEEPALIVED_UNIT)] if change is not None or stale else []
    actions += keep_running(KEEPALIVED_UNIT, facts["services"].get(KEEPALIVED_UNIT, {}), reload)
    if not actions:
        return noop("keepalived_config", KEEPALIVED_CONFIG, "keepalived runs the gateway's VIP config")
    return Step("keepalived_config", KEEPALIVED_CONFIG, tuple(actions), change=change)


KEEPALIVED_CONFIG_OP = Operation("keepalived_config", _facts, _plan)
