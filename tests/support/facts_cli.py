"""Runs `vllmctl facts INVENTORY --json` as a user would, with its own HOME (its ~/.ssh) and state folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_facts(inventory: Path, home: Path, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(state), "NO_COLOR": "1"}
    argv = [sys.executable, "-m", "vllmctl", "facts", str(inventory), "--json"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
