"""No-op converge on 16 lab hosts: vllmctl vs pyinfra (deploy and bare `exec -- true`) vs ansible-playbook.

Usage (root, lab tools installed): python benchmarks/fleet_apply.py [--hosts 16] [--runs 3] [--peers VENV]
pyinfra and ansible-core are installed into a throwaway venv under /tmp (created when missing). Every
tool runs as a fresh process per run; medians and ratios are printed, and written as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from vllmctl.inventory import load_inventory
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


def write_inventory(fleet_inventory: Path, work: Path) -> Path:
    doc = yaml.safe_load(fleet_inventory.read_text())
    doc["models"] = {"tiny": {**MODEL, "hosts": list(doc["hosts"])}}
    doc.pop("secrets", None)
    path = work / "vllmctl.yml"
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
        (h.address, {"ssh_user": ssh.user, "ssh_key": ssh.identity_file,
                     "ssh_known_hosts_file": ssh.known_hosts, "ssh_strict_host_key_checking": "yes"})
        for h in inventory.hosts.values()
    ]  # fmt: skip
    (work / "pyinfra_inventory.py").write_text(f"hosts = {pyinfra_hosts!r}\n")
    (work / "deploy.py").write_text(
        "from pyinfra.operations import files, server, systemd\n"
        f"for path in {DIRS!r}:\n"
        "    files.directory(name=f'dir {path}', path=path, mode='755', user='root', group='root')\n"
        f"server.user(name='user', user='vllm', system=True, home={HOME!r}, shell='/usr/sbin/nologin',"
        " create_home=False)\n"
        f"files.directory(name='home', path={HOME!r}, mode='750', user='vllm', group='vllm')\n"
        f"files.put(name='env', src={str(work / 'tiny.env')!r}, dest='/etc/vllmctl/tiny.env', mode='600',"
        " user='root', group='root')\n"
        f"files.put(name='unit', src={str(work / 'unit')!r}, dest='/etc/systemd/system/{UNIT}', mode='644',"
        " user='root', group='root')\n"
        f"systemd.service(name='svc', service={UNIT!r}, running=False, enabled=False)\n"
    )
    lines = ["[fleet]"] + [f"{h.name} ansible_host={h.address}" for h in inventory.hosts.values()]
    lines += [
        "[fleet:vars]",
        f"ansible_user={ssh.user}",
        f"ansible_ssh_private_key_file={ssh.identity_file}",
        f"ansible_ssh_common_args='-o UserKnownHostsFile={ssh.known_hosts} -o StrictHostKeyChecking=yes'",
        "ansible_python_interpreter=/usr/bin/python3",
    ]
    (work / "ansible_hosts.ini").write_text("\n".join(lines) + "\n")
    play = [{
        "hosts": "fleet", "become": True, "gather_facts": True,
        "tasks": [
            {"file": {"path": "{{ item }}", "state": "directory", "mode": "0755", "owner": "root",
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
    return {"inventory": inventory_path}


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    return time.perf_counter() - started, result


def measure(name: str, argv: list[str], env: dict[str, str], cwd: Path, runs: int, no_change: Any) -> float:
    timed(argv, env, cwd)  # warm-up (and first converge for the peers)
    times = []
    for _ in range(runs):
        seconds, result = timed(argv, env, cwd)
        if result.returncode != 0 or not no_change(result.stdout, result.stderr):
            sys.exit(f"{name} did not report a clean no-op (rc {result.returncode}):\n"
                     f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")  # fmt: skip
        times.append(seconds)
    if os.environ.get("BENCH_DEBUG"):
        print(result.stdout[-4000:], result.stderr[-2000:])
    median = statistics.median(times)
    print(f"{name:<38} median {median:6.2f} s   runs {', '.join(f'{t:.2f}' for t in times)}", flush=True)
    return median


def pyinfra_clean(changes_allowed: bool) -> Any:
    """pyinfra's `Grand total` row: hosts, success (= changed), error, no change."""

    def check(stdout: str, stderr: str) -> bool:
        rows = (stdout + stderr).splitlines()
        row = next((line.split() for line in rows if line.strip().startswith("Grand total")), None)
        return row is not None and row[4] == "-" and (changes_allowed or row[3] == "-")

    return check


def ansible_clean(stdout: str, stderr: str) -> bool:
    return "changed=0" in stdout and not re.search(r"changed=[1-9]", stdout)


def vllmctl_no_change(stdout: str, stderr: str) -> bool:
    return all(h["recap"]["changed"] == 0 for h in json.loads(stdout)["hosts"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--peers", default="/tmp/vllmctl-bench-peers", help="venv for pyinfra and ansible")
    parser.add_argument("--out", help="write the medians as JSON here")
    args = parser.parse_args()
    peers = Path(args.peers)
    ensure_peers(peers)
    work = Path(tempfile.mkdtemp(prefix="vllmctl-bench-"))
    name = f"bench{os.getpid()}"
    env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(work / "state"), "ANSIBLE_PIPELINING": "1",
           "ANSIBLE_FORKS": str(args.hosts), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(work / "ans"),
           "PATH": f"{peers / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
    try:
        fleet = start_fleet(name, args.hosts, work / "lab.yml")
        inventory = write_inventory(fleet.inventory, work)
        write_peer_files(inventory, work)
        vllmctl = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--playbook", "units"]
        subprocess.run(vllmctl, capture_output=True, env=env, check=False)  # first converge
        results = {
            "vllmctl apply (no-op, facts + checks)": measure(
                "vllmctl apply (no-op, facts + checks)", vllmctl, env, work, args.runs, vllmctl_no_change
            ),
            "pyinfra exec -- true": measure(
                "pyinfra exec -- true",
                [str(peers / "bin" / "pyinfra"), "-y", "--parallel", str(args.hosts), "pyinfra_inventory.py",
                 "exec", "--", "true"],
                env, work, args.runs, pyinfra_clean(changes_allowed=True),
            ),
            "pyinfra deploy (no-op)": measure(
                "pyinfra deploy (no-op)",
                [str(peers / "bin" / "pyinfra"), "-y", "--sudo", "--parallel", str(args.hosts),
                 "pyinfra_inventory.py", "deploy.py"],
                env, work, args.runs, pyinfra_clean(changes_allowed=False),
            ),
            "ansible-playbook (no-op, gather facts)": measure(
                "ansible-playbook (no-op, gather facts)",
                [str(peers / "bin" / "ansible-playbook"), "-i", "ansible_hosts.ini", "-f", str(args.hosts),
                 "playbook.yml"],
                env, work, args.runs, ansible_clean,
            ),
        }  # fmt: skip
    finally:
        stop_fleet(name)
    ours = results["vllmctl apply (no-op, facts + checks)"]
    print(
        f"\nvllmctl / pyinfra exec -- true : {ours / results['pyinfra exec -- true']:.2f}x (target <= 1.5x)"
    )
    print(f"vllmctl / pyinfra deploy        : {ours / results['pyinfra deploy (no-op)']:.2f}x")
    ansible = results["ansible-playbook (no-op, gather facts)"]
    print(f"ansible / vllmctl               : {ansible / ours:.1f}x faster (target >= 5x)")
    if args.out:
        Path(args.out).write_text(json.dumps({"hosts": args.hosts, "runs": args.runs, "medians_s": results}))


if __name__ == "__main__":
    main()
