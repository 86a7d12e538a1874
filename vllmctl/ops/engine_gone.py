"""Before engine units start: wait, bounded, until no process of their last run is left in their cgroups and
no process holds the GPUs they are pinned to; else fail, naming each process with its state and the fix."""

from __future__ import annotations

from collections.abc import Sequence

from vllmctl.ops.base import Action, Command, Upload, make_dirs, run
from vllmctl.ops.reboot import RebootWhenStale
from vllmctl.paths import CGROUP_ROOTS, ENGINE_GONE_HELPER

# `systemctl stop` has already waited TimeoutStopSec and sent SIGKILL: what is left after this is stuck
# (a worker in NCCL or CUDA teardown), and a start beside it would find too little GPU memory
STALE_WAIT_S = 30.0
EXIT_STALE = 3

# Runs as root with the host's python3 (standard library only): reads cgroups, /proc and nvidia-smi.
SCRIPT = (
    f"EXIT_STALE = {EXIT_STALE}\nCGROUP_ROOTS = {CGROUP_ROOTS!r}\n"
    + r'''
import os, subprocess, sys, time

if os.environ.get("VLLMCTL_CGROUP_ROOT"):  # tests: a cgroup tree of their own
    CGROUP_ROOTS = (os.environ["VLLMCTL_CGROUP_ROOT"],)
deadline, units = float(sys.argv[1]), sys.argv[2:]


def show(unit, prop):
    argv = ["systemctl", "show", "-p", prop, "--value", "--", unit]
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()


def cgroup_pids(group):
    """Every process in a cgroup, children included, from the first hierarchy that has it."""
    for root in CGROUP_ROOTS:
        top = root + group
        if not os.path.isdir(top):
            continue
        pids = []
        for path, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with open(os.path.join(path, "cgroup.procs")) as procs:
                    pids += [int(pid) for pid in procs.read().split()]
        return pids
    return []


def pinned_gpus(unit):
    for word in show(unit, "Environment").split():
        if word.startswith("CUDA_VISIBLE_DEVICES="):
            return {g for g in word.split("=", 1)[1].split(",") if g}
    return set()


def smi(query):
    argv = ["nvidia-smi", "--query-" + query, "--format=csv,noheader,nounits"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(done.stdout.strip() or done.stderr.strip())
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def gpu_indexes():
    """GPU UUID -> index; empty when nvidia-smi cannot say (then no GPU is checked)."""
    try:
        return {row[-1]: row[0] for row in smi("gpu=index,uuid")}
    except (OSError, subprocess.SubprocessError):
        return {}


def gpu_holders():
    """(pid, name, MiB, GPU index) of each compute process; none when nvidia-smi cannot say."""
    if not index_of:
        return []
    try:
        apps = smi("compute-apps=pid,process_name,used_memory,gpu_uuid")
    except (OSError, subprocess.SubprocessError):
        return []
    return [(row[0], ",".join(row[1:-2]), row[-2], index_of[row[-1]]) for row in apps
            if len(row) >= 4 and row[-1] in index_of]


def proc(pid, name):
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:
        return name or "?", "gone"
    state = fields.get("State", "?").strip()
    # a zombie has let go of its memory and devices: only its parent has yet to read its exit status
    return fields.get("Name", name).strip(), "gone" if state.startswith("Z") else state


def other_engine(pid):
    """A process of another vllmctl unit, left running: it shares the GPU by plan."""
    try:
        with open(f"/proc/{pid}/cgroup") as cgroup:
            owner = cgroup.read().strip().rsplit("/", 1)[-1]
    except OSError:
        return False
    return owner.startswith("vllmctl-") and owner.endswith(".service") and owner not in units


def stopped_ago(unit):
    since = show(unit, "InactiveEnterTimestampMonotonic")
    if not since.isdigit() or since == "0":
        return ""
    ago = time.clock_gettime(time.CLOCK_MONOTONIC) - int(since) / 1e6
    return f"; the unit stopped {ago:.0f} s ago"


def left_over():
    """(pid, evidence, unit whose cgroup holds it or None) of each process in the way of a start."""
    found = []
    holders = gpu_holders()
    for unit in units:
        for pid in cgroup_pids(groups[unit]):
            name, state = proc(pid, "")
            if state != "gone":
                found.append((pid, f"pid {pid} ({name}, state {state}) is still in {unit}'s cgroup", unit))
        for pid, name, mib, gpu in holders:
            if gpu not in pins[unit]:
                continue
            name, state = proc(pid, name)
            if state == "gone" or other_engine(pid):
                continue
            found.append((pid, f"pid {pid} ({name}, state {state}) holds {mib} MiB of GPU {gpu}, "
                               f"which {unit} is pinned to", None))
    return found


# what the wait reads once: where each unit's processes are listed, the GPUs it is pinned to, their UUIDs
groups = {unit: show(unit, "ControlGroup") or "/system.slice/" + unit for unit in units}
pins = {unit: pinned_gpus(unit) for unit in units}
index_of = gpu_indexes() if any(pins.values()) else {}
start = time.monotonic()
while True:
    found = left_over()
    waited = time.monotonic() - start
    if not found:
        if waited >= 1:
            print(f"{' '.join(units)}: the last run's processes were gone after {waited:.0f} s")
        sys.exit(0)
    if waited >= deadline:
        break
    time.sleep(1)
pids = sorted({str(pid) for pid, _, _ in found if str(pid).isdigit()}, key=lambda p: (len(p), p))
print(f"{' '.join(units)}: not started: processes still there {waited:.0f} s after the stop", file=sys.stderr)
for _, line, unit in found:
    print("  " + line + (stopped_ago(unit) if unit else ""), file=sys.stderr)
print(f"fix: kill -9 {' '.join(pids)}, then apply again; a process in state D (uninterruptible) cannot be "
      "killed: reboot the host", file=sys.stderr)
sys.exit(EXIT_STALE)
'''
)


def wait_gone(units: Sequence[str], deadline_s: float = STALE_WAIT_S) -> tuple[Action, ...]:
    """The helper uploaded, then run for `units` (their unit files already in place: it reads their GPUs)."""
    helper_dir = ENGINE_GONE_HELPER.rsplit("/", 1)[0]
    return (
        make_dirs(helper_dir),
        Upload(ENGINE_GONE_HELPER, SCRIPT, "0755"),
        run("python3", ENGINE_GONE_HELPER, f"{deadline_s:g}", *units, wait_s=deadline_s),
    )


def gone_or_reboot(
    units: Sequence[str], deadline_s: float = STALE_WAIT_S
) -> tuple[Action | RebootWhenStale, ...]:
    """`wait_gone`, but stuck processes reboot the host instead of failing it (engine.reboot_on_stale)."""
    *helper, check = wait_gone(units, deadline_s)
    assert isinstance(check, Command)
    return (*helper, RebootWhenStale(check, EXIT_STALE))
