"""Running the controller-side tools the lab needs (ip, mount, ssh-keygen, ...) with errors that say why.

`run` raises a VllmctlError with the output tail; `try_run` is for teardown, where failures are expected.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from vllmctl.errors import VllmctlError


def run(argv: Sequence[str], hint: str = "", input_text: str | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        list(argv), capture_output=True, text=True, input=input_text, cwd=cwd, check=False
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise VllmctlError(
            f"`{' '.join(argv)}` failed (exit {result.returncode}): {tail}",
            hint or "see the message above; `vllmctl lab down --name NAME` removes what was made",
        )
    return result.stdout


def try_run(argv: Sequence[str]) -> bool:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return result.returncode == 0
