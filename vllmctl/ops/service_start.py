"""Service health: after a replica is (re)started, wait on the host for `/health` then `/v1/models`
listing the model, up to a deadline; on failure print the last journal lines. Recorded per applied hash."""

from __future__ import annotations

from collections.abc import Sequence

from vllmctl.bench.readiness import MAX_WAIT_S
from vllmctl.ops.base import (
    Action,
    Args,
    FactRequests,
    Facts,
    Operation,
    Step,
    Upload,
    make_dirs,
    noop,
    run,
    sha256_text,
)
from vllmctl.ops.env_reader import READ_ENV
from vllmctl.ops.system import starts
from vllmctl.paths import STATE_DIR, WAIT_HEALTHY_HELPER
from vllmctl.releases.unit_exit import UNIT_EXIT_SOURCE
from vllmctl.render.quoting import confined_path, http_url, path_component

JOURNAL_LINES = 40

# Runs with the host's python3 (stdlib only) as root, so it can read the API key from the 0600 env file.
POLL = (
    READ_ENV
    + UNIT_EXIT_SOURCE
    + f"MAX_WAIT_S = {MAX_WAIT_S!r}\n"
    + """
import json, subprocess, sys, time, urllib.request
base, model, deadline, unit, env_file, lines = sys.argv[1:7]
deadline = float(deadline)
key = read_env(env_file).get("VLLM_API_KEY", "")
headers = {"Authorization": "Bearer " + key} if key else {}


def unit_state():
    show = ["systemctl", "show", unit, "-p", "ActiveState", "-p", "SubState", "-p", "NRestarts"]
    out = subprocess.run(show, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def crashed(first):
    # waiting out the deadline on an engine that has exited would only delay the rollback
    count = first.get("NRestarts", "0").strip()
    reason = unit_exit_reason(unit_state(), int(count) if count.isdigit() else 0)
    return "the service exited (" + reason + ")" if reason else ""


first = unit_state()
start, wait, error = time.monotonic(), 0.5, ""
while True:
    try:
        req = urllib.request.Request(base + "/health", headers=headers)
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()
        req = urllib.request.Request(base + "/v1/models", headers=headers)
        with urllib.request.urlopen(req, timeout=5) as r:
            listed = [m.get("id") for m in json.load(r).get("data", [])]
        if model in listed:
            print(f"{unit}: ready after {time.monotonic() - start:.0f}s")
            sys.exit(0)
        error = f"/v1/models lists {listed}, not {model}"
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    elapsed = time.monotonic() - start
    exited = crashed(first)
    if exited or elapsed + wait > deadline:
        break
    print(f"{unit}: not ready after {elapsed:.0f}s: {error}", flush=True)
    time.sleep(wait)
    wait = min(wait * 1.5, MAX_WAIT_S)
if exited:
    print(f"{unit}: not ready after {elapsed:.0f}s: {exited}; last error: {error}", file=sys.stderr)
else:
    print(f"{unit}: not ready within {deadline:.0f}s: {error}", file=sys.stderr)
journal = ["journalctl", "-u", unit, "-n", lines, "--no-pager", "-o", "cat"]
print(subprocess.run(journal, capture_output=True, text=True).stdout, file=sys.stderr)
sys.exit(1)
"""
)


def healthy_path(unit: str) -> str:
    return confined_path(STATE_DIR, path_component(f"{unit}.healthy"))


def _facts(args: Args) -> FactRequests:
    return {"paths": (healthy_path(str(args["name"])),), "units": (), "applied": ()}


def _plan_health(args: Args, facts: Facts) -> Step:
    """Polls unless this applied hash passed once and the `service` step before it leaves the engine running
    (planned from the same facts): an engine this run restarts is polled even back to a release that passed
    before (an interrupted run had started another one in between), else the gate finds it loading."""
    unit, applied = str(args["name"]), str(args["applied"])
    if not args.get("running", True):
        return noop("service_health", unit, f"{unit} is kept stopped")
    record = facts["paths"].get(healthy_path(unit), {"type": "absent"})
    if record.get("sha256") == sha256_text(applied) and not starts(unit, applied, facts):
        return noop("service_health", unit, f"{unit} answered /health and /v1/models with this release")
    record = Upload(healthy_path(unit), applied, secret=True)  # a digest of the env file: never shown
    return Step("service_health", unit, (*wait_serving([args]), record))


def wait_serving(engines: Sequence[Args]) -> tuple[Action, ...]:
    """The helper uploaded, then polled for each engine ({name, port, model, env_file, deadline_s}) until it
    answers /health and lists its model; none when there is no engine to wait for."""
    if not engines:
        return ()
    helper = (make_dirs(WAIT_HEALTHY_HELPER.rsplit("/", 1)[0]), Upload(WAIT_HEALTHY_HELPER, POLL, "0755"))
    polls = []
    for engine in engines:
        base = http_url("127.0.0.1", int(engine["port"]))
        deadline = f"{float(engine['deadline_s']):g}"
        unit, model, env_file = str(engine["name"]), str(engine["model"]), str(engine["env_file"])
        argv = (WAIT_HEALTHY_HELPER, base, model, deadline, unit, env_file, str(JOURNAL_LINES))
        polls.append(run("python3", *argv, wait_s=float(engine["deadline_s"])))
    return (*helper, *polls)


SERVICE_HEALTH = Operation("service_health", _facts, _plan_health, {"running": True, "deadline_s": 300.0})
