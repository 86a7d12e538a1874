"""The gateway's operation: HAProxy's config (and the key and TLS files it reads) compared by hash; a new
config is written as a candidate, checked with `haproxy -c` on the host, and only then switched in and
reloaded (the master hands its listeners to the new worker; the old one finishes what it serves). With
`absent` (a host no longer among the gateway's hosts) HAProxy is stopped and vllmctl's files removed, only
where vllmctl's own directory shows it set HAProxy up there."""

from __future__ import annotations

from collections.abc import Mapping

from vllmctl.ops.base import (
    Action,
    Args,
    Command,
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
from vllmctl.paths import (
    HAPROXY_ADMIN_SOCKET,
    HAPROXY_CANDIDATE,
    HAPROXY_CONFIG,
    HAPROXY_FILES_DIR,
    HAPROXY_STATE_FILE,
    HAPROXY_STATE_LOCK,
    HAPROXY_UNIT,
)
from vllmctl.render.quoting import shell_word


def _files(args: Args) -> Mapping[str, str]:
    files: Mapping[str, str] = args.get("files") or {}
    return files


def _facts(args: Args) -> FactRequests:
    return {"paths": (HAPROXY_CONFIG, HAPROXY_FILES_DIR, *_files(args)), "services": (HAPROXY_UNIT,)}


def was_gateway(facts: Facts) -> bool:
    """vllmctl set HAProxy up here: its files directory exists (a HAProxy of someone else's is left alone)."""
    return bool(facts["paths"].get(HAPROXY_FILES_DIR, {}).get("type") == "directory")


def _absent(facts: Facts) -> Step:
    if not was_gateway(facts):
        return noop("gateway_config", HAPROXY_CONFIG, "not a gateway host")
    actions = stop_and_disable(HAPROXY_UNIT, facts["services"].get(HAPROXY_UNIT, {}))
    actions.append(run("rm", "-f", HAPROXY_CONFIG, HAPROXY_CANDIDATE, HAPROXY_STATE_FILE))
    # the directory last: it is what marks the host as one to clean, so a run that fails before it retries
    actions.append(run("rm", "-rf", HAPROXY_FILES_DIR))
    return Step("gateway_config", HAPROXY_CONFIG, tuple(actions))


def reload_keeping_state() -> Command:
    """Drained servers stay drained across the reload: the new worker reads their state from the file dumped
    just before it. Both under the state lock a rollout's drain and ready take (gateway/runtime.py): a drain
    set between the dump and the reload reached only the old worker and was lost with it."""
    socket = f"UNIX-CONNECT:{HAPROXY_ADMIN_SOCKET}"
    dump = (
        f"echo 'show servers state' | socat -t 10 - {shell_word(socket)} > {shell_word(HAPROXY_STATE_FILE)}"
    )
    steps = f"if [ -S {shell_word(HAPROXY_ADMIN_SOCKET)} ]; then {dump}; fi; systemctl reload {HAPROXY_UNIT}"
    return Command(shell=f"( flock -w 60 9 && {{ {steps}; }} ) 9>{shell_word(HAPROXY_STATE_LOCK)}")


def _plan(args: Args, facts: Facts) -> Step:
    if args.get("absent"):
        return _absent(facts)
    content = str(args["content"])
    paths = facts["paths"]
    current = paths.get(HAPROXY_CONFIG, {"type": "absent"})
    unit = facts["services"].get(HAPROXY_UNIT, {})
    actions: list[Action] = []
    if paths.get(HAPROXY_FILES_DIR, {}).get("type") != "directory":
        actions.append(run("install", "-d", "-m", "0700", HAPROXY_FILES_DIR))
    for path, text in _files(args).items():
        if paths.get(path, {}).get("sha256") != sha256_text(text):
            actions.append(Upload(path, text, mode="0600", secret=True))
    # a config HAProxy refuses stops the step here: the live one is never replaced by it
    check = run("haproxy", "-c", "-q", "-f", HAPROXY_CANDIDATE)
    switch, change = checked_switch(HAPROXY_CONFIG, HAPROXY_CANDIDATE, content, current, check)
    actions += switch
    reload = [reload_keeping_state()] if actions else []
    actions += keep_running(HAPROXY_UNIT, unit, reload)
    if not actions:
        return noop("gateway_config", HAPROXY_CONFIG, "HAProxy runs the gateway's config")
    return Step("gateway_config", HAPROXY_CONFIG, tuple(actions), change=change)


GATEWAY_CONFIG = Operation("gateway_config", _facts, _plan, {"files": {}})
