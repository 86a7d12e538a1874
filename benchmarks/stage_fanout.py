"""Time until every host holds a verified copy of a controller model folder: the weights fan-out (#32) against
the controller pushing every host its own copy, in one run on a lab fleet.

Usage (root, lab tools installed):
  python3 benchmarks/stage_fanout.py [--hosts 16] [--size-gib 1.0] [--controller-mbit 200] [--json-out PATH]
                                     [--source folder|hub]

A lab fleet of `--hosts` hosts stages one synthetic model folder (the lab's tiny model plus 4 random shards,
`--size-gib` in all; cached at /var/tmp/vllmctl-fanout-bench/synth and reused while its sizes match) with
`vllmctl apply --playbook <base_layout + model_staging> --fresh-facts --forks N`. The controller's link to the
hosts (standing in for the hub or a WAN) is limited to `--controller-mbit` by a `tbf` root qdisc on the
fleet's bridge: controller -> host traffic leaves through the bridge device and is shaped, bridged host <->
host traffic never passes it (each copy's achieved rate is printed, so a reader sees it). Modes, in order:
  single   one host, `staging: {fanout: false}`, `--limit <first host>`: one copy through the limited link
  today    every host, `staging: {fanout: false}`: the controller pushes every host
  fanout   every host, the default: the controller pushes one host, the hosts copy from each other (rsync)
Before each mode the folder and the controller pushes' partials are removed from every host; after it, every
file on every host is checked by `sudo sha256sum` against the controller's. A mode's time is the wall time of
its `vllmctl apply`; a mode with a host not verified is reported failed. Ratios are against `single` from the
same run. An untimed warm-up applies base_layout and installs rsync (timed apart: a first fan-out installs it
itself). The record goes to benchmarks/data/stage_fanout-<date>.json unless `--json-out` says otherwise.
`--source hub` stages the same files as a hub model served by the lab's stand-in hub
(vllmctl/lab/hubstandin.py, on the controller, behind the same limited link): `single` and `today` are each
host's own download, `fanout` the seed's download then host to host. Its warm-up also makes the engine venv
each host's download runs in (huggingface_hub from the lab's package index), and a file is verified through
the hub cache's snapshot.
"""

from __future__ import annotations

import argparse
import datetime
import filecmp
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllmctl.fanout.scripts import INSTALL
from vllmctl.lab import state
from vllmctl.lab.hubstandin import HubRepo, HubStandIn
from vllmctl.lab.teardown import layout_of
from vllmctl.lab.testing import LabFleet, LabHostInfo, start_fleet, stop_fleet
from vllmctl.lab.tinymodel import ensure_tiny_model
from vllmctl.ops.engine import venv_path
from vllmctl.paths import HUB_CACHE, incoming_dir
from vllmctl.runner.fleet.staging import local_manifest

BENCH_DIR = Path("/var/tmp/vllmctl-fanout-bench")
FOLDER = BENCH_DIR / "synth"  # on the controller, and at the same path on every host
SHARDS = 4
CHUNK = 64 << 20
SSH_USER = "ops"
GOAL_RATIO = 3.0
OWN_PUSH = "failed (own push)"
MODES = ("single", "today", "fanout")
Done = subprocess.CompletedProcess[str]
PLAYBOOKS = {
    "base": {"name": "base", "phases": [{"name": "base", "tasks": [{"task": "base_layout"}]}]},
    "stage": {
        "name": "stage",
        "phases": [
            {"name": "base", "tasks": [{"task": "base_layout"}]},
            {"name": "models", "tasks": [{"task": "model_staging"}]},
        ],
    },
    "stage-hub": {  # a hub download reads the model's env file (HF_ENDPOINT)
        "name": "stage-hub",
        "phases": [
            {"name": "base", "tasks": [{"task": "base_layout"}]},
            {"name": "models", "tasks": [{"task": "model_env_files"}, {"task": "model_staging"}]},
        ],
    },
}
HUB_REPO = "bench/synth"
HUB_FOLDER = f"{HUB_CACHE}/models--bench--synth"


def ensure_folder(size_gib: float) -> Path:
    """The tiny model's files plus SHARDS random shards, `size_gib` in all; shards of the right size kept."""
    tiny = ensure_tiny_model()
    FOLDER.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for source in sorted(p for p in tiny.iterdir() if p.is_file()):
        dest = FOLDER / source.name
        wanted.add(dest.name)
        if not dest.is_file() or not filecmp.cmp(source, dest, shallow=False):
            shutil.copyfile(source, dest)
    tiny_bytes = sum((FOLDER / name).stat().st_size for name in wanted)
    shard = max(CHUNK, (int(size_gib * 2**30) - tiny_bytes) // SHARDS)
    for index in range(1, SHARDS + 1):
        path = FOLDER / f"shard-{index:05d}-of-{SHARDS:05d}.bin"
        wanted.add(path.name)
        if path.is_file() and path.stat().st_size == shard:
            continue
        print(f"writing {path} ({shard / 2**20:,.0f} MiB)", flush=True)
        partial = path.with_suffix(".partial")
        with partial.open("wb") as out:
            for start in range(0, shard, CHUNK):
                out.write(os.urandom(min(CHUNK, shard - start)))
        partial.rename(path)
    for stray in FOLDER.iterdir():
        if stray.name not in wanted:
            shutil.rmtree(stray) if stray.is_dir() else stray.unlink()
    return FOLDER


@dataclass(frozen=True)
class Bench:
    fleet: LabFleet
    work: Path
    env: dict[str, str]
    sums: dict[str, str]  # file name -> the controller's sha256
    timeout: float  # seconds for one `vllmctl apply` and one remote command in it
    logs: Path | None
    hub: HubStandIn | None = None  # --source hub
    controller: str = ""  # its address on the fleet's bridge

    @property
    def on_host(self) -> str:
        """Where a host's copy is read: the folder, or the hub cache's snapshot."""
        return str(FOLDER) if self.hub is None else f"{HUB_FOLDER}/snapshots/{self.hub.repo.commit}"

    def on_hosts(self, command: str, hosts: Sequence[LabHostInfo] = ()) -> dict[str, Done]:
        with ThreadPoolExecutor(max_workers=4) as pool:
            runs = {h.name: pool.submit(self.fleet.ssh, h, command, 1800) for h in hosts or self.fleet.hosts}
        return {name: run.result() for name, run in runs.items()}

    def clear(self) -> None:
        """The folder (the fan-out's incoming directory inside it too) and the controller pushes' partials."""
        paths = shlex.join([str(FOLDER), incoming_dir(SSH_USER), HUB_FOLDER, f"{HUB_CACHE}/.vllmctl-staged"])
        for name, run in self.on_hosts(f"sudo rm -rf -- {paths}").items():
            if run.returncode != 0:
                raise SystemExit(f"clearing {name} failed: {run.stderr.strip()}")

    def verified(self, hosts: Sequence[LabHostInfo]) -> list[str]:
        """The hosts whose every file's sha256 matches the controller's."""
        command = f"cd {shlex.quote(self.on_host)} && sudo sha256sum -- {shlex.join(sorted(self.sums))}"
        good = []
        for name, run in self.on_hosts(command, hosts).items():
            pairs = [line.split(maxsplit=1) for line in run.stdout.splitlines() if line.strip()]
            if run.returncode == 0 and {file: digest for digest, file in pairs} == self.sums:
                good.append(name)
        return good

    def apply(self, argv: list[str]) -> tuple[float, Done]:
        started = time.perf_counter()
        command = [sys.executable, "-m", "vllmctl", "apply", *argv, "--yes", "--json"]
        run = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=self.timeout)
        return time.perf_counter() - started, run


def write_inventory(fleet: LabFleet, work: Path, fanout: bool, hub: HubStandIn | None = None) -> Path:
    doc = yaml.safe_load(fleet.inventory.read_text())
    source = str(FOLDER) if hub is None else HUB_REPO
    model = {"source": source, "hosts": fleet.name, "engine_args": {"max_model_len": 256}}
    doc["models"] = {"synth": model}
    if hub is not None:
        doc["defaults"].setdefault("vars", {})["env"] = {"HF_ENDPOINT": hub.url}
    if not fanout:
        doc["staging"] = {"fanout": False}
    path = work / ("fanout.yml" if fanout else "push.yml")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    subprocess.run([sys.executable, "-m", "vllmctl", "validate", str(path)], check=True, capture_output=True)
    return path


def copies_summary(staging: dict[str, Any]) -> dict[str, Any]:
    """How the fan-out's hosts got the folder: sources histogram and each copy's achieved rate."""
    hosts: dict[str, dict[str, Any]] = staging.get("hosts", {})
    sources = Counter(c["source"] if c["status"] == "ok" else OWN_PUSH for c in hosts.values())
    rates: dict[str, list[float]] = {"controller": [], "host": []}
    for copy in hosts.values():
        if copy["status"] == "ok" and copy["seconds"] > 0 and copy["bytes"] > 0:
            kind = "controller" if copy["source"] == "controller" else "host"
            rates[kind].append(round(copy["bytes"] / 2**20 / copy["seconds"], 1))
    return {
        "sources": dict(sources.most_common()),
        "from_controller": sources.get("controller", 0),
        "from_hosts": sum(n for s, n in sources.items() if s not in ("controller", OWN_PUSH)),
        "skipped": staging.get("skipped", {}),
        "errors": {h: c["error"] for h, c in hosts.items() if c["status"] != "ok"},
        "rates_mib_s": rates,
    }


def run_mode(bench: Bench, mode: str, inventory: Path) -> dict[str, Any]:
    hosts = list(bench.fleet.hosts[:1] if mode == "single" else bench.fleet.hosts)
    bench.clear()
    playbook = bench.work / ("stage.yml" if bench.hub is None else "stage-hub.yml")
    argv = [str(inventory), "--playbook", str(playbook), "--fresh-facts",
            "--forks", str(len(bench.fleet.hosts)), "--timeout", str(int(bench.timeout))]  # fmt: skip
    if mode == "single":
        argv += ["--limit", hosts[0].name]
    print(f"{mode}: staging {len(hosts)} host(s)...", flush=True)
    wall, run = bench.apply(argv)
    if bench.logs is not None:
        (bench.logs / f"{mode}.stdout.json").write_text(run.stdout)
        (bench.logs / f"{mode}.stderr").write_text(run.stderr)
    try:
        doc = json.loads(run.stdout)
    except ValueError:
        doc = {}
    verified = bench.verified(hosts)
    ok = run.returncode == 0 and len(verified) == len(hosts)
    record: dict[str, Any] = {"hosts": len(hosts), "wall_s": round(wall, 2), "rc": run.returncode,
                              "verified": len(verified), "ok": ok}  # fmt: skip
    staging = doc.get("staging", {}).get(str(FOLDER) if bench.hub is None else HUB_FOLDER)
    if staging is not None:
        record["copies"] = copies_summary(staging)
        if staging.get("seed"):
            record["copies"]["seed"] = staging["seed"]
    if bench.hub is not None:  # the hosts' GETs of file bytes (not the controller's read of config.json)
        got = [
            w
            for c, m, w in bench.hub.log
            if m == "GET" and w.startswith("resolve/") and c != bench.controller
        ]
        record["hub_file_downloads"] = len(got)
        bench.hub.log.clear()
    if not ok:
        record["stderr_tail"] = run.stderr[-3000:]
        print(f"{mode}: FAILED (rc {run.returncode}, {len(verified)}/{len(hosts)} verified)\n{run.stderr}")
    return record


def spread(rates: list[float]) -> str:
    if not rates:
        return "-"
    low, high = min(rates), max(rates)
    return f"median {statistics.median(rates):,.1f} MiB/s (min {low:,.1f}, max {high:,.1f}, n={len(rates)})"


def report(result: dict[str, Any]) -> None:
    modes: dict[str, Any] = result["modes"]
    single, mbit = modes["single"]["wall_s"], result["controller_mbit"]
    print(f"\nfolder {result['folder_mib']:,.0f} MiB ({result['files']} files); controller link: tbf {mbit} "
          f"mbit/s = {mbit / 8 / 1.048576:,.1f} MiB/s, host <-> host links not limited")  # fmt: skip
    print(f"{'mode':<8} {'hosts':>5} {'wall s':>9} {'x single':>9} {'verified':>9}  result")
    for mode, r in modes.items():
        cells = f"{mode:<8} {r['hosts']:>5} {r['wall_s']:>9.1f} {r['wall_s'] / single:>8.2f}x"
        print(f"{cells} {r['verified']:>5}/{r['hosts']:<3}  {'ok' if r['ok'] else 'FAILED'}")
    print(
        f"single: {result['folder_mib'] / single:,.1f} MiB/s through the limited link (folder / apply's wall)"
    )
    if result.get("source") == "hub":
        print(
            "files fetched from the hub: "
            + ", ".join(f"{m} {r['hub_file_downloads']}" for m, r in modes.items())
        )
    copies = modes["fanout"].get("copies")
    if copies:
        seeded = f"seed {copies['seed']} downloaded it, " if copies.get("seed") else ""
        print(f"fanout copies: {seeded}{copies['from_controller']} from the controller, "
              f"{copies['from_hosts']} from hosts; sources {copies['sources']}")  # fmt: skip
        print(f"  controller -> host: {spread(copies['rates_mib_s']['controller'])}")
        print(f"  host -> host:       {spread(copies['rates_mib_s']['host'])}")
        for host, why in {**copies["skipped"], **copies["errors"]}.items():
            print(f"  {host}: {why}")
    else:
        print("fanout: no fan-out in apply's JSON (its `staging` is empty)")
    ratio = modes["fanout"]["wall_s"] / single
    met = "met" if modes["fanout"]["ok"] and ratio <= GOAL_RATIO else "NOT met"
    print(f"goal: fan-out within {GOAL_RATIO:g}x one host's single copy at {result['hosts']} hosts: "
          f"{ratio:.2f}x, {met} (today's push: {modes['today']['wall_s'] / single:.2f}x)")  # fmt: skip


def bridge_address(fleet: LabFleet) -> str:
    """The controller's address on the fleet's bridge (where the lab's package server listens)."""
    from urllib.parse import urlparse

    return urlparse(fleet.index_url).hostname or ""


def make_hub_venvs(bench: Bench, inventory: Path) -> None:
    """The engine venv each host's hub download runs in, with huggingface_hub as a real engine venv has it."""
    engine = yaml.safe_load(inventory.read_text())["defaults"]["engine"]
    venv = venv_path(engine["name"], engine["version"])
    index = shlex.quote(bench.fleet.index_url)
    command = (f"sudo sh -c 'test -x {venv}/bin/python || python3 -m venv {venv}' && "
               f"sudo {venv}/bin/pip install -q --index-url {index} huggingface_hub")  # fmt: skip
    started = time.perf_counter()
    if failed := {n: r.stderr[-500:] for n, r in bench.on_hosts(command).items() if r.returncode}:
        raise SystemExit(f"making the engine venvs failed: {failed}")
    print(f"warm-up: engine venvs with huggingface_hub in {time.perf_counter() - started:.1f} s", flush=True)


def interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--size-gib", type=float, default=1.0, help="the synthetic model folder's size")
    parser.add_argument("--controller-mbit", type=int, default=200, help="the controller's link (tc tbf)")
    parser.add_argument("--name", default=f"bfan{os.getpid()}", help="the lab fleet's name")
    today = datetime.date.today().isoformat()
    default_out = Path(__file__).resolve().parent / "data" / f"stage_fanout-{today}.json"
    if "--source" in sys.argv and "hub" in sys.argv:
        default_out = default_out.with_name(f"stage_fanout-hub-{today}.json")
    parser.add_argument("--json-out", type=Path, default=default_out)
    parser.add_argument(
        "--log-dir", type=Path, help="keep each mode's `vllmctl apply` stdout and stderr here"
    )
    parser.add_argument("--source", choices=("folder", "hub"), default="folder", help="what the hosts stage")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    manifest = local_manifest(str(ensure_folder(args.size_gib)), BENCH_DIR / "sha256.json") or []
    folder_mib = sum(f["size"] for f in manifest) / 2**20
    # every host's push through the limited link at once, three times over
    timeout = 600 + 3 * args.hosts * folder_mib * 8.4 / args.controller_mbit
    bridge, hub = "", None
    with tempfile.TemporaryDirectory(prefix="vllmctl-stage-fanout-") as tmp:
        work = Path(tmp)
        (work / "cache" / "vllmctl").mkdir(parents=True)
        shutil.copyfile(BENCH_DIR / "sha256.json", work / "cache" / "vllmctl" / "sha256.json")  # no re-hash
        env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(work / "state"),
               "XDG_CACHE_HOME": str(work / "cache")}  # fmt: skip
        for name, playbook in PLAYBOOKS.items():
            (work / f"{name}.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
        try:
            print(f"lab up {args.name} ({args.hosts} hosts)...", flush=True)
            fleet = start_fleet(args.name, args.hosts, work / "lab.yml")
            saved = state.load(args.name)
            assert saved is not None
            bridge = layout_of(saved).bridge
            sums = {f["name"]: f["sha256"] for f in manifest}
            hub = None
            if args.source == "hub":
                hub = HubStandIn(HubRepo(HUB_REPO, FOLDER), bridge_address(fleet)).__enter__()
                env.update(HF_ENDPOINT=hub.url, HF_HOME=str(work / "controller-hf"))  # the planner's config
            bench = Bench(fleet, work, env, sums, timeout, args.log_dir, hub, bridge_address(fleet))
            push, fan = write_inventory(fleet, work, False, hub), write_inventory(fleet, work, True, hub)
            wall, run = bench.apply(
                [str(push), "--playbook", str(work / "base.yml"), "--forks", str(args.hosts)]
            )
            if run.returncode != 0:
                raise SystemExit(f"warm-up apply failed:\n{run.stderr[-3000:]}")
            started = time.perf_counter()
            installs = bench.on_hosts(f"sudo sh -c {shlex.quote(INSTALL)}")
            if failed := {name: r.stderr for name, r in installs.items() if r.returncode}:
                raise SystemExit(f"installing rsync failed: {failed}")
            rsync_s = time.perf_counter() - started
            print(f"warm-up: base_layout {wall:.1f} s, rsync installed on every host in {rsync_s:.1f} s")
            if hub is not None:
                make_hub_venvs(bench, push)
            tbf = ["tbf", "rate", f"{args.controller_mbit}mbit", "burst", "256kb", "latency", "200ms"]
            subprocess.run(["tc", "qdisc", "replace", "dev", bridge, "root", *tbf], check=True)
            modes = {mode: run_mode(bench, mode, fan if mode == "fanout" else push) for mode in MODES}
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not leave the fleet behind
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if hub is not None:
                hub.__exit__(None, None, None)
            if bridge:
                subprocess.run(
                    ["tc", "qdisc", "del", "dev", bridge, "root"], check=False, capture_output=True
                )
            stop_fleet(args.name)
    result = {
        "date": today, "source": args.source, "hosts": args.hosts, "controller_mbit": args.controller_mbit,
        "folder_mib": round(folder_mib, 1), "files": len(manifest), "rsync_install_s": round(rsync_s, 2),
        "modes": modes,
        "goal": {"ratio": round(modes["fanout"]["wall_s"] / modes["single"]["wall_s"], 2), "max": GOAL_RATIO},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "cpus": os.cpu_count(), "load": os.getloadavg()[0],
    }  # fmt: skip
    report(result)
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"record: {args.json_out}")
    return 0 if all(r["ok"] for r in modes.values()) else 1


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        raise SystemExit("interrupted: the lab fleet and the qdisc were removed") from None
