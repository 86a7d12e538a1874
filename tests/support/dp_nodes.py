"""Temp-dir nodes of a data-parallel group for the group-release flow tests: a systemctl stand-in that keeps
unit state as files and writes every call to an order file the nodes share (a node's rank dies at start when
its unit carries a marker), and each node's engine venv and /etc/vllmctl."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from local_remote import LocalRemote

from vllmctl.inventory.model import EngineSpec
from vllmctl.tasks.desired import venv_path


def systemctl(node: str, order: Path, dies: str = "") -> str:
    """Unit state as files; every call also in `order`; the node's rank dies at once when its unit carries
    `dies`."""
    died = f'grep -q -- "{dies}" "$ROOT/etc/systemd/system/$u" 2>/dev/null' if dies else "false"
    return f"""#!/bin/bash
echo "systemctl $*" >> "$ROOT/calls"
echo "{node} $*" >> "{order}"
verb=$1; shift; skip=0; now=0; units=()
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case $a in -p) skip=1;; --now) now=1;; -*) ;; *) units+=("$a");; esac
done
for u in "${{units[@]}}"; do case $verb in
  start|restart) if {died}; then rm -f "$ROOT/active/$u"; else touch "$ROOT/active/$u"; fi;;
  stop) rm -f "$ROOT/active/$u";;
  disable) [ $now = 1 ] && rm -f "$ROOT/active/$u";;
  is-active) [ -e "$ROOT/active/$u" ] && echo active || echo inactive;;
  show) s=inactive; [ -e "$ROOT/active/$u" ] && s=active
        printf 'Id=%s\\nActiveState=%s\\nSubState=running\\nNRestarts=0\\n\\n' "$u" "$s";; esac; done
true
"""


def dp_nodes(
    root: Path, names: Sequence[str], engine: EngineSpec, dies: dict[str, str]
) -> dict[str, LocalRemote]:
    """One temp-dir node per name under `root` (calls in `root/order`), with the engine venv and
    /etc/vllmctl; `dies`: node -> the marker that kills its rank."""
    found = {}
    for name in names:
        remote = LocalRemote(root / name, name, systemctl(name, root / "order", dies.get(name, "")))
        bin_dir = remote.local(f"{venv_path(engine)}/bin")
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").touch(mode=0o755)
        (bin_dir / "ray").write_text("#!/bin/sh\nexit 99\n")  # never asked: a call would fail the release
        (bin_dir / "ray").chmod(0o755)
        remote.local("/etc/vllmctl").mkdir(parents=True)
        found[name] = remote
    return found
