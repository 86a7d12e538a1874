"""vllmctl vs pyinfra (and optionally ansible-playbook) on lab fleets of 16, 64 and 128 hosts, same run.

Usage (root, lab tools installed; hold the lab lock):
  flock /tmp/vllmctl-lab.lock python benchmarks/fleet_apply.py [--hosts 16,64,128] [--runs 3] [--ansible]

Per fleet size, every figure is printed beside pyinfra's from the same run, rounds interleaved:
  no-op converge        `vllmctl apply --playbook units` vs `pyinfra exec -- true` (target <= 1.5x) and a
                        no-op `pyinfra deploy` of the same state; vllmctl's untimed warm-up run keeps each
                        host's facts, so the timed runs reuse them; `--fresh-facts` (every fact read under
                        sudo) is timed beside it, and pyinfra running vllmctl's no-op script
  unit change           a sampling preset (`sampling: {temperature: ...}`) changed for the model on every
                        host, alternating between two values, `--no-gate` (the units playbook starts no
                        engine, so no stand-in engine runs and nothing is gated); pyinfra: a deploy that
                        rewrites a unit file with alternating content and reloads systemd
  status / history      `vllmctl status --interval 0` and `vllmctl history` across the fleet
  where the time goes   one no-op converge in-process with timers per phase (process start, plan, connect,
                        facts round trip, parse, plan per host), the controller's CPU and peak memory, and
                        the CPU the lab hosts spent during each run (sshd, sudo, the scripts: read from
                        the fleets' cgroups, so other work on the machine is not counted)
pyinfra and ansible-core are installed into a throwaway venv under /tmp (created when missing). Every tool
runs as a fresh process per run; medians are printed, and written as JSON with --out.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from vllmctl.facts.witness import SETTLE_S
from vllmctl.inventory import load_inventory
from vllmctl.lab.machines import cgroup_roots
from vllmctl.lab.testing import start_fleet, stop_fleet
from vllmctl.tasks.desired import HostContext, render_env, render_unit

MODEL = {"source": "/srv/models/tiny", "port": 8000}
DIRS = ["/etc/vllmctl", "/var/lib/vllmctl", "/var/lib/vllmctl/state", "/var/lib/vllmctl/releases",
        "/var/log/vllmctl", "/opt/vllmctl", "/opt/vllmctl/venvs"]  # fmt: skip
HOME = "/var/lib/vllmctl/home"
UNIT = "vllmctl-tiny-0.service"


def ensure_peers(venv: Path) -> None:
    if not (venv / "bin" / "pyinfra").exists() or not (venv / "bin" / "ansible-playbook").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "pyinfra", "ansible-core"], check=True)


FLEET_MAX = 64  # hosts in one lab fleet; a bigger benchmark fleet is several lab fleets in one inventory


def merged_inventory(fleets: list[Path], work: Path) -> Path:
    """One inventory over several lab fleets: each fleet's own key and known_hosts set on its hosts."""
    doc = yaml.safe_load(fleets[0].read_text())
    for other in fleets[1:]:
        more = yaml.safe_load(other.read_text())
        ssh = {key: more["defaults"]["ssh"][key] for key in ("identity_file", "known_hosts")}
        doc["hosts"].update({name: {**host, "ssh": ssh} for name, host in more["hosts"].items()})
        doc["groups"].update(more["groups"])
    path = work / "lab-merged.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_inventory(fleet_inventory: Path, work: Path, temperature: float | None = None) -> Path:
    """The no-op inventory, or (temperature given) one whose sampling preset changes every host's unit."""
    doc = yaml.safe_load(fleet_inventory.read_text())
    model: dict[str, Any] = {**MODEL, "hosts": list(doc["hosts"])}
    if temperature is not None:
        model["sampling"] = {"temperature": temperature}
    doc["models"] = {"tiny": model}
    doc.pop("secrets", None)
    path = work / ("vllmctl.yml" if temperature is None else f"vllmctl-t{temperature}.yml")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_peer_files(inventory_path: Path, work: Path) -> dict[str, Path]:
    """The same desired state for pyinfra and Ansible: directories, user, env file, unit, stopped service."""
    inventory = load_inventory(inventory_path)
    first = next(iter(inventory.hosts.values()))
    ctx = HostContext(inventory, first)
    model = ctx.models()[0]
    (work / "tiny.env").write_text(render_env(ctx, model))
    (work / "unit").write_text(render_unit(ctx, model, ctx.plan(model).replicas[0]))
    ssh = first.ssh
    pyinfra_hosts = [
        (h.address, {"ssh_user": h.ssh.user, "ssh_key": h.ssh.identity_file,
                     "ssh_known_hosts_file": h.ssh.known_hosts, "ssh_strict_host_key_checking": "yes"})
        for h in inventory.hosts.values()
    ]  # fmt: skip
    (work / "pyinfra_inventory.py").write_text(f"hosts = {pyinfra_hosts!r}\n")
    (work / "deploy.py").write_text(
        "from pyinfra.operations import files, server, systemd\n"
        f"for path in {DIRS!r}:\n"
        "    files.directory(name=f'dir {path}', path=path, mode='700' if path.endswith('/state') else '755',"
        " user='root', group='root')\n"
        f"server.user(name='user', user='vllm', system=True, home={HOME!r}, shell='/usr/sbin/nologin',"
        " create_home=False)\n"
        f"files.directory(name='home', path={HOME!r}, mode='750', user='vllm', group='vllm')\n"
        f"files.put(name='env', src={str(work / 'tiny.env')!r}, dest='/etc/vllmctl/tiny.env', mode='600',"
        " user='root', group='root')\n"
        f"files.put(name='unit', src={str(work / 'unit')!r}, dest='/etc/systemd/system/{UNIT}', mode='644',"
        " user='root', group='root')\n"
        f"systemd.service(name='svc', service={UNIT!r}, running=False, enabled=False)\n"
    )
    lines = ["[fleet]"] + [
        f"{h.name} ansible_host={h.address} ansible_ssh_private_key_file={h.ssh.identity_file}"
        f" ansible_ssh_common_args='-o UserKnownHostsFile={h.ssh.known_hosts} -o StrictHostKeyChecking=yes'"
        for h in inventory.hosts.values()
    ]
    lines += ["[fleet:vars]", f"ansible_user={ssh.user}", "ansible_python_interpreter=/usr/bin/python3"]
    (work / "ansible_hosts.ini").write_text("\n".join(lines) + "\n")
    play = [{
        "hosts": "fleet", "become": True, "gather_facts": True,
        "tasks": [
            {"file": {"path": "{{ item }}", "state": "directory", "owner": "root",
                      "mode": "{{ '0700' if item.endswith('/state') else '0755' }}",
                      "group": "root"}, "loop": DIRS},
            {"user": {"name": "vllm", "system": True, "home": HOME, "shell": "/usr/sbin/nologin",
                      "create_home": False}},
            {"file": {"path": HOME, "state": "directory", "mode": "0750", "owner": "vllm", "group": "vllm"}},
            {"copy": {"src": str(work / "tiny.env"), "dest": "/etc/vllmctl/tiny.env", "mode": "0600",
                      "owner": "root", "group": "root"}},
            {"copy": {"src": str(work / "unit"), "dest": f"/etc/systemd/system/{UNIT}", "mode": "0644",
                      "owner": "root", "group": "root"}},
            {"systemd": {"name": UNIT, "enabled": False, "state": "stopped"}},
        ],
    }]  # fmt: skip
    (work / "playbook.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    for variant in ("a", "b"):  # a unit change: alternating content, then a daemon-reload, as vllmctl does
        (work / f"unit_{variant}").write_text((work / "unit").read_text() + f"# variant {variant}\n")
        (work / f"change_{variant}.py").write_text(
            "from pyinfra.operations import files, systemd\n"
            f"files.put(name='unit', src={str(work / f'unit_{variant}')!r}, "
            "dest='/etc/systemd/system/pyinfra-bench.service', mode='644', user='root', group='root')\n"
            "systemd.daemon_reload(name='reload')\n"
        )
    return {"inventory": inventory_path}


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float  # user + system seconds of the process and its threads
    rss_mib: float  # peak resident memory
    rc: int
    stdout: str
    stderr: str
    hosts_cpu: float = 0.0  # seconds of CPU the lab hosts spent meanwhile (sshd, sudo, scripts)


def fleet_cpu(fleets: list[str]) -> Callable[[], float]:
    """CPU seconds the fleets' hosts have used so far: every lab host runs in its fleet's cgroup."""
    roots = [root for root in cgroup_roots() if (root / "cgroup.procs").exists()]

    def used() -> float:
        total = 0
        for name in fleets:
            stats = [root / f"vllmctl-lab-{name}" / "cpu.stat" for root in roots]
            found = next((path for path in stats if path.exists()), None)
            if found is not None:
                usage = next(line for line in found.read_text().splitlines() if line.startswith("usage_usec"))
                total += int(usage.split()[1])
        return total / 1e6

    return used


def run_child(
    argv: list[str], env: dict[str, str], cwd: Path, hosts_cpu: Callable[[], float] = lambda: 0.0
) -> Run:
    """One fresh process; wall time, its own CPU and peak memory from wait4, the hosts' CPU meanwhile."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        hosts_before = hosts_cpu()
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        hosts = hosts_cpu() - hosts_before
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        cpu, rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        return Run(wall, cpu, rss, proc.returncode, stdout, stderr, hosts)


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[int], list[str]]  # run number -> argv (a change alternates between two variants)
    ok: Callable[[Run], bool]


def measure(
    cases: list[Case], env: dict[str, str], cwd: Path, runs: int, hosts_cpu: Callable[[], float]
) -> dict[str, list[Run]]:
    """A warm-up of each, then `runs` rounds with the cases interleaved: each sees the same machine load."""
    found: dict[str, list[Run]] = {case.name: [] for case in cases}
    for number in range(-1, runs):
        for case in cases:
            run = run_child(case.argv(number), env, cwd, hosts_cpu)
            if not case.ok(run):
                tails = f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
                sys.exit(f"{case.name}: unexpected outcome (rc {run.rc}):\n{tails}")
            if number >= 0:
                found[case.name].append(run)
    return found


def pyinfra_clean(changes_allowed: bool) -> Callable[[Run], bool]:
    """pyinfra's `Grand total` row: hosts, success (= changed), error, no change."""

    def check(run: Run) -> bool:
        rows = (run.stdout + run.stderr).splitlines()
        row = next((line.split() for line in rows if line.strip().startswith("Grand total")), None)
        return run.rc == 0 and row is not None and row[4] == "-" and (changes_allowed or row[3] == "-")

    return check


def ansible_clean(run: Run) -> bool:
    return "changed=0" in run.stdout and not re.search(r"changed=[1-9]", run.stdout)


def vllmctl_recap(changed: bool) -> Callable[[Run], bool]:
    def check(run: Run) -> bool:
        if run.rc != 0:
            return False
        hosts = json.loads(run.stdout)["hosts"].values()
        return all((h["recap"]["changed"] > 0) == changed and h["status"] == "ok" for h in hosts)

    return check


def json_answer(run: Run) -> bool:
    """status exits 1 when engines are down (the units playbook starts none); the answer is what counts."""
    try:
        json.loads(run.stdout)
    except ValueError:
        return False
    return run.rc in (0, 1)


@contextmanager
def timers(spent: dict[str, float], patches: list[tuple[Any, str, str]]) -> Iterator[None]:
    """Wrap each (owner, attribute) so its time is summed under a name, across threads."""
    lock = threading.Lock()
    saved = []
    for owner, attr, key in patches:
        real = getattr(owner, attr)

        def timed(*args: Any, _real: Any = real, _key: str = key, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _real(*args, **kwargs)
            finally:
                with lock:
                    spent[_key] += time.perf_counter() - started

        saved.append((owner, attr, real))
        setattr(owner, attr, timed)
    try:
        yield
    finally:
        for owner, attr, real in saved:
            setattr(owner, attr, real)


def where_time_goes(
    inventory: Path, hosts: int, forks: int | None, env: dict[str, str], cwd: Path
) -> dict[str, Any]:
    """One no-op converge in this process with timers on each phase; process start measured apart. Per-host
    phases run in threads, so their sums include waiting for the GIL and for the other hosts' traffic."""
    from vllmctl.console import Ui
    from vllmctl.runner import DEFAULT_FORKS
    from vllmctl.runner import apply as flow
    from vllmctl.runner.core import execute, remote
    from vllmctl.transport import ssh

    start = run_child([sys.executable, "-m", "vllmctl", "apply", "--help"], env, cwd)  # what apply imports
    spent: dict[str, float] = defaultdict(float)
    patches = [
        (ssh.SshTransport, "connect", "connect"),  # TCP, SSH handshake, host key check, auth
        (ssh.SshTransport, "run", "round trip"),  # includes the connect of the first command
        (remote, "parse_sections", "parse facts"),
        (execute, "phase_calls", "expand tasks (render)"),
        (execute, "plan_calls", "plan steps"),
        (ssh.SshTransport, "close", "close"),
        (flow, "run_playbook", "converge"),
    ]
    request = flow.ApplyRequest(inventory=str(inventory), playbook="units", forks=forks or DEFAULT_FORKS)
    cpu = time.process_time()
    started = time.perf_counter()
    kept = {"XDG_CACHE_HOME": env["XDG_CACHE_HOME"]}  # the facts the timed runs kept
    with timers(spent, patches), mock.patch.dict(os.environ, kept):
        flow.apply(request, Ui(io.StringIO(), io.StringIO()), lambda count, name: True)
    total = time.perf_counter() - started
    spent["round trip"] -= spent["connect"]
    return {
        "process start (`apply --help`: imports)": {"wall_s": start.wall, "cpu_s": start.cpu},
        "before SSH (inventory, plan, contexts)": {"wall_s": total - spent["converge"]},
        "converge (all hosts)": {"wall_s": spent["converge"], "cpu_s": time.process_time() - cpu},
        **{
            name: {"sum_s": spent[name], "per_host_ms": 1000 * spent[name] / hosts}
            for name in (
                "connect",
                "round trip",
                "parse facts",
                "expand tasks (render)",
                "plan steps",
                "close",
            )
        },
    }


FIELDS = ("wall", "cpu", "rss_mib", "hosts_cpu")
SAME_REMOTE_WORK = "pyinfra exec (vllmctl's no-op script)"
FRESH = "vllmctl apply (no-op, --fresh-facts)"


def median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(run, field) for run in runs)


def medians(found: dict[str, list[Run]]) -> dict[str, dict[str, float]]:
    return {case: {f: median(runs, f) for f in FIELDS} for case, runs in found.items()}


def noop_script(inventory: Path) -> str:
    """The script a no-op `apply --playbook units` over kept facts runs on a host, as the SSH user: the lock
    probe, the witness of the kept facts and the live facts (the known paths are the requested ones)."""
    from vllmctl.facts.witness import witness_words
    from vllmctl.runner.core.plan import playbook_requests
    from vllmctl.runner.core.remote import reuse_script
    from vllmctl.runner.fleet.hosts import host_contexts
    from vllmctl.tasks.playbooks import load_playbook

    loaded = load_inventory(inventory)
    ctx = next(iter(host_contexts(loaded, list(loaded.hosts)[:1], {}, stage_models=False).values()))
    requests = playbook_requests(load_playbook("units"), ctx)
    words = witness_words(requests)
    assert words is not None, "every fact of the units playbook has a witness"
    return reuse_script(requests, words, [])


def fleet_figures(args: argparse.Namespace, hosts: int, peers: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="vllmctl-bench-"))
    names = [f"bench{os.getpid()}-{hosts}-{part}" for part in range(-(-hosts // FLEET_MAX))]
    env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(work / "state"), "ANSIBLE_PIPELINING": "1",
           "ANSIBLE_FORKS": str(hosts), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(work / "ans"),
           "PATH": f"{peers / 'bin'}:{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(work / "cache")}  # fmt: skip
    pyinfra = [str(peers / "bin" / "pyinfra"), "-y", "--parallel", str(hosts), "pyinfra_inventory.py"]
    forks = ["--forks", str(args.forks)] if args.forks else []
    try:
        sizes = [min(FLEET_MAX, hosts - FLEET_MAX * part) for part in range(len(names))]
        fleets = [
            start_fleet(n, size, work / f"{n}.yml").inventory for n, size in zip(names, sizes, strict=True)
        ]
        lab = merged_inventory(fleets, work)
        inventory = write_inventory(lab, work)
        variants = [write_inventory(lab, work, t) for t in (0.2, 0.3)]
        write_peer_files(inventory, work)
        vllmctl = [sys.executable, "-m", "vllmctl"]
        apply = [*vllmctl, "apply", "--json", "--playbook", "units", *forks]
        run_child([*apply, str(inventory)], env, work)  # first converge
        time.sleep(SETTLE_S + 0.5)  # files changed within the settle time are never kept (docs/executor.md)
        exec_true = Case(
            "pyinfra exec -- true", lambda n: [*pyinfra, "exec", "--", "true"], pyinfra_clean(True)
        )
        # the remote half of a no-op converge alone: vllmctl's own no-op script, as the SSH user, by pyinfra
        facts = "sh -c " + shlex.quote(noop_script(inventory))
        noop = [
            # the warm-up run keeps each host's facts; the timed runs reuse them (docs/executor.md)
            Case("vllmctl apply (no-op)", lambda n: [*apply, str(inventory)], vllmctl_recap(changed=False)),
            exec_true,
            Case(FRESH, lambda n: [*apply, "--fresh-facts", str(inventory)], vllmctl_recap(changed=False)),
            Case(SAME_REMOTE_WORK, lambda n: [*pyinfra, "exec", "--", facts], pyinfra_clean(True)),
            Case("pyinfra deploy (no-op)", lambda n: [*pyinfra, "--sudo", "deploy.py"], pyinfra_clean(False)),
        ]
        if args.ansible:
            ansible = [str(peers / "bin" / "ansible-playbook"), "-i", "ansible_hosts.ini", "-f", str(hosts)]
            noop.append(Case("ansible-playbook (no-op)", lambda n: [*ansible, "playbook.yml"], ansible_clean))
        hosts_cpu = fleet_cpu(names)
        found = measure(noop, env, work, args.runs, hosts_cpu)
        if args.noop_only:
            return {
                "medians": medians(found),
                "phases": where_time_goes(inventory, hosts, args.forks, env, work),
            }
        change = [
            Case("vllmctl apply (unit change, --no-gate)",
                 lambda n: [*apply, "--no-gate", str(variants[n % 2])], vllmctl_recap(changed=True)),
            Case("pyinfra deploy (unit change)",
                 lambda n: [*pyinfra, "--sudo", f"change_{'ab'[n % 2]}.py"], pyinfra_clean(True)),
        ]  # fmt: skip
        found |= measure(change, env, work, args.runs, hosts_cpu)
        run_child([*apply, str(inventory)], env, work)  # back to the no-op inventory's units
        time.sleep(SETTLE_S + 0.5)
        run_child([*apply, str(inventory)], env, work)  # a no-op that keeps the facts the phases below reuse
        reads = [
            Case("vllmctl status",
                 lambda n: [*vllmctl, "status", str(inventory), "--json", "--interval", "0"], json_answer),
            Case("vllmctl history", lambda n: [*vllmctl, "history", str(inventory), "--json", *forks],
                 json_answer),
            exec_true,
        ]  # fmt: skip
        again = measure(reads, env, work, args.runs, hosts_cpu)
        found |= {k: v for k, v in again.items() if k != exec_true.name}
        found["pyinfra exec -- true (beside reads)"] = again[exec_true.name]
        phases = where_time_goes(inventory, hosts, args.forks, env, work)
    finally:
        for name in names:
            stop_fleet(name)
    return {
        "medians": medians(found),
        "walls": {case: [round(r.wall, 3) for r in runs] for case, runs in found.items()},
        "phases": phases,
    }


def report(hosts: int, figures: dict[str, Any], forks: int) -> None:
    medians = figures["medians"]
    floor = medians["pyinfra exec -- true"]["wall"]
    print(f"\n== {hosts} hosts (vllmctl --forks {forks}, pyinfra --parallel {hosts}) ==")
    print(f"{'':46} {'wall s':>7} {'cpu s':>6} {'hosts':>6} {'MiB':>5}  {'/ pyinfra exec':>14}")
    for case, m in medians.items():
        base = (
            medians["pyinfra exec -- true (beside reads)"]["wall"]
            if case in ("vllmctl status", "vllmctl history")
            else floor
        )
        print(f"{case:46} {m['wall']:7.2f} {m['cpu']:6.2f} {m['hosts_cpu']:6.2f} {m['rss_mib']:5.0f}  "
              f"{m['wall'] / base:13.2f}x")  # fmt: skip
    ours, same = medians["vllmctl apply (no-op)"]["wall"], medians[SAME_REMOTE_WORK]["wall"]
    print(f"gap to pyinfra exec -- true: {ours - floor:.2f} s = the hosts' work (the no-op script) "
          f"{same - floor:.2f} s + vllmctl itself (start-up, client) {ours - same:.2f} s")  # fmt: skip
    cpu_line(hosts, medians["vllmctl apply (no-op)"], medians["pyinfra exec -- true"])
    print("where a no-op converge's time goes (one run in-process; per-host phases overlap in threads):")
    for phase, value in figures["phases"].items():
        shown = ", ".join(f"{k} {v:.3f}" if k.endswith("_s") else f"{k} {v:.1f}" for k, v in value.items())
        print(f"  {phase:40} {shown}")


def cpu_line(hosts: int, ours: dict[str, float], peer: dict[str, float]) -> None:
    """Here the hosts share the controller's cores, so a run's wall time is bounded by the CPU it causes."""
    total, base = ours["cpu"] + ours["hosts_cpu"], peer["cpu"] + peer["hosts_cpu"]
    print(f"CPU per run (controller + hosts, {os.cpu_count()} cores shared): vllmctl {ours['cpu']:.2f} + "
          f"{ours['hosts_cpu']:.2f} = {total:.2f} s, pyinfra exec -- true {peer['cpu']:.2f} + "
          f"{peer['hosts_cpu']:.2f} = {base:.2f} s ({total / base:.2f}x); per host: controller "
          f"+{1000 * (ours['cpu'] - peer['cpu']) / hosts:.1f} ms, hosts "
          f"+{1000 * (ours['hosts_cpu'] - peer['hosts_cpu']) / hosts:.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", default="16,64,128", help="fleet sizes, comma list (default 16,64,128)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--forks", type=int, help="vllmctl --forks (default: vllmctl's own default)")
    parser.add_argument("--noop-only", action="store_true", help="only the no-op converge and its peers")
    parser.add_argument(
        "--ansible", action="store_true", help="also time ansible-playbook (slow on big fleets)"
    )
    parser.add_argument("--peers", default="/tmp/vllmctl-bench-peers", help="venv for pyinfra and ansible")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    from vllmctl.runner import DEFAULT_FORKS

    peers = Path(args.peers)
    ensure_peers(peers)
    results = {}
    for hosts in (int(n) for n in args.hosts.split(",")):
        results[hosts] = fleet_figures(args, hosts, peers)
        report(hosts, results[hosts], args.forks or DEFAULT_FORKS)
    print("\nsummary: wall seconds, median; ratio to pyinfra exec -- true in the same run (target <= 1.5x);")
    print("cpu: the same ratio for the CPU each run caused (controller + lab hosts)")
    columns = ("no-op", "pyinfra", "ratio", "cpu", "fresh", "ratio", "change", "pyinfra", "status", "history")
    print(f"{'hosts':>5} " + " ".join(f"{c:>7}" for c in columns))
    for hosts, figures in results.items():
        m = defaultdict(float, {case: v["wall"] for case, v in figures["medians"].items()})
        used = {case: v["cpu"] + v["hosts_cpu"] for case, v in figures["medians"].items()}
        noop, floor = m["vllmctl apply (no-op)"], m["pyinfra exec -- true"]
        cpu = used["vllmctl apply (no-op)"] / used["pyinfra exec -- true"]
        row = (noop, floor, noop / floor, cpu, m[FRESH], m[FRESH] / floor,
               m["vllmctl apply (unit change, --no-gate)"], m["pyinfra deploy (unit change)"],
               m["vllmctl status"], m["vllmctl history"])  # fmt: skip
        # --noop-only measures no change, status or history: shown as "-", not as 0 seconds
        ratios = (2, 3, 5)
        cells = (f"{v:6.2f}x" if i in ratios else f"{v:7.2f}" if v else "      -" for i, v in enumerate(row))
        print(f"{hosts:5} " + " ".join(cells))
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": args.runs, "fleets": results}, indent=1))


if __name__ == "__main__":
    main()
