"""The gateway's virtual IP: keepalived's config compared by hash; a new one is written as a candidate,
checked with `keepalived -t` on the host, and only then switched in and reloaded."""

from __future__ import annotations

from vllmctl.ops.base import (
    Action,
    Args,
    FactRequests,
    Facts,
    FileChange,
    Operation,
    Step,
    Upload,
    noop,
    run,
    sha256_text,
)
from vllmctl.paths import KEEPALIVED_CANDIDATE, KEEPALIVED_CONFIG, KEEPALIVED_UNIT

KEEPALIVED_DIR = KEEPALIVED_CONFIG.rsplit("/", 1)[0]


def _facts(args: Args) -> FactRequests:
    return {"paths": (KEEPALIVED_DIR, KEEPALIVED_CONFIG), "services": (KEEPALIVED_UNIT,)}


def _plan(args: Args, facts: Facts) -> Step:
    content = str(args["content"])
    current = facts["paths"].get(KEEPALIVED_CONFIG, {"type": "absent"})
    unit = facts["services"].get(KEEPALIVED_UNIT, {})
    actions: list[Action] = []
    change = None
    if current.get("sha256") != sha256_text(content):
        if facts["paths"].get(KEEPALIVED_DIR, {}).get("type") != "directory":
            actions.append(run("install", "-d", "-m", "0755", KEEPALIVED_DIR))
        change = FileChange(KEEPALIVED_CONFIG, content, exists=current.get("type") == "file")
        actions += [
            Upload(KEEPALIVED_CANDIDATE, content),
            # keepalived >= 2.0 parses the file and exits non-zero on an error: the live one stays
            run("keepalived", "-t", "-f", KEEPALIVED_CANDIDATE),
            run("mv", "-f", KEEPALIVED_CANDIDATE, KEEPALIVED_CONFIG),
        ]
    if unit.get("unit_file_state") != "enabled":
        actions.append(run("systemctl", "enable", KEEPALIVED_UNIT))
    if unit.get("active_state") != "active":
        actions.append(run("systemctl", "restart", KEEPALIVED_UNIT))
    elif change is not None:
        actions.append(run("systemctl", "reload", KEEPALIVED_UNIT))
    if not actions:
        return noop("keepalived_config", KEEPALIVED_CONFIG, "keepalived runs the gateway's VIP config")
    return Step("keepalived_config", KEEPALIVED_CONFIG, tuple(actions), change=change)


KEEPALIVED_CONFIG_OP = Operation("keepalived_config", _facts, _plan)
