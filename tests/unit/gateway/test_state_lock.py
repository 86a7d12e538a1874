"""The gateway's reload and a rollout's drain in a real shell (stand-ins for socat and systemctl, the real
flock): a drain sent while the reload runs waits for it, so it never lands between the dump of the servers'
states and the reload that reads them back (where it reached only the old worker and was lost)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from vllmctl.gateway.runtime import set_state
from vllmctl.ops.gateway import reload_keeping_state
from vllmctl.paths import HAPROXY_ADMIN_SOCKET, HAPROXY_FILES_DIR, HAPROXY_STATE_FILE, HAPROXY_STATE_LOCK

SOCAT = """#!/bin/sh
read -r line
echo "socat $line" >> "$LOG"
"""
SYSTEMCTL = """#!/bin/sh
echo "reload begins" >> "$LOG"
sleep 1
echo "reload ends" >> "$LOG"
"""


def shell(command: str, tmp: Path) -> str:
    """The rendered command with its host paths moved under `tmp`."""
    moves = {
        HAPROXY_STATE_LOCK: tmp / "state.lock",
        HAPROXY_STATE_FILE: tmp / "server-state",
        HAPROXY_ADMIN_SOCKET: tmp / "admin.sock",
        HAPROXY_FILES_DIR: tmp,
    }
    for path, moved in moves.items():
        command = command.replace(path, str(moved))
    return command


def test_a_drain_sent_during_the_reload_waits_for_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("socat", SOCAT), ("systemctl", SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "admin.sock"))  # `[ -S admin.sock ]`: the reload dumps the states first
    log = tmp_path / "log"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log)}
    reload = subprocess.Popen(["sh", "-c", shell(reload_keeping_state().render(), tmp_path)], env=env)
    deadline = time.monotonic() + 10
    while "reload begins" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and reload.poll() is None, "the reload never began"
        time.sleep(0.01)
    drain = shell(set_state(["tiny/a-8000"], "drain").render(), tmp_path)
    subprocess.run(["sh", "-c", drain], env=env, check=True, timeout=30)
    assert reload.wait(timeout=30) == 0
    listener.close()
    assert log.read_text().splitlines() == [
        "socat show servers state",
        "reload begins",
        "reload ends",
        "socat set server tiny/a-8000 state drain",
    ]
