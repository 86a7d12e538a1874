"""What the controller remembers about each lab fleet: its state file, its locks and the inotify limit.

The state file is written before anything is created, so `lab down` can always find what to remove.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllmctl.errors import VllmctlError

FLEETS_ROOT = Path(os.environ.get("VLLMCTL_LAB_STATE", "/var/lib/vllmctl/lab"))
# beside the fleets' folder (one file system: a rename), outside it (no state.json under it is a fleet)
TRASH_DIR = FLEETS_ROOT.parent / f".{FLEETS_ROOT.name}-trash"
LOCK_DIR = Path("/run/lock/vllmctl-lab") if Path("/run/lock").is_dir() else FLEETS_ROOT / ".locks"
INOTIFY = Path("/proc/sys/fs/inotify/max_user_instances")


@dataclass
class FleetState:
    name: str
    subnet: int
    host_count: int
    gpus_spec: str
    driver: str | None
    phase: str = "creating"  # creating -> up
    created_at: float = 0.0
    pkg_server_pid: int | None = None
    launcher_pids: dict[str, int] = field(default_factory=dict)
    inventory: str | None = None


def fleet_dir(name: str) -> Path:
    return FLEETS_ROOT / name


def state_path(name: str) -> Path:
    return fleet_dir(name) / "state.json"


def save(state: FleetState) -> None:
    path = state_path(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(asdict(state), indent=2) + "\n")
    scratch.replace(path)


def load(name: str) -> FleetState | None:
    try:
        raw = json.loads(state_path(name).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise VllmctlError(
            f"the state of lab fleet {name!r} at {state_path(name)} is unreadable: {exc}",
            f"remove what is left by hand (netns vllmctl-{name}-*, mounts under {fleet_dir(name)})",
        ) from exc
    return FleetState(**raw)


def all_states() -> list[FleetState]:
    if not FLEETS_ROOT.is_dir():
        return []
    found = [load(path.parent.name) for path in sorted(FLEETS_ROOT.glob("*/state.json"))]
    return [state for state in found if state is not None]


@contextmanager
def lock(name: str, busy_message: str, busy_hint: str) -> Iterator[None]:
    """A non-blocking exclusive lock: a second holder is told why it cannot go on, instead of waiting."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise VllmctlError(busy_message, busy_hint) from exc
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def blocking_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path`, waiting for any other holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wait_lock(name: str) -> AbstractContextManager[None]:
    return blocking_lock(LOCK_DIR / f"{name}.lock")


def process_alive(pid: int | None, needle: str) -> bool:
    """True when `pid` runs and its command line contains `needle` (so a reused pid is not mistaken)."""
    if pid is None:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return needle in cmdline


def inotify_needed(total_hosts: int) -> int:
    # sshd in each host needs inotify instances; past ~21 hosts the default 128 runs out.
    return 128 + 8 * total_hosts


def raise_inotify(total_hosts: int) -> None:
    """Raise the limit for all fleets together, remembering the original value once."""
    current = int(INOTIFY.read_text())
    needed = inotify_needed(total_hosts)
    if current >= needed:
        return
    original = FLEETS_ROOT / ".inotify-original"
    if not original.exists():
        original.write_text(f"{current}\n")
    INOTIFY.write_text(f"{needed}\n")


def restore_inotify_if_last() -> None:
    original = FLEETS_ROOT / ".inotify-original"
    if all_states() or not original.exists():
        return
    INOTIFY.write_text(original.read_text())
    original.unlink()
