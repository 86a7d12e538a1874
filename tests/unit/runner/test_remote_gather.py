"""SshRemote's facts round trip run in a real shell: one write, the lock probe's refusal, the facts parsed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllmctl.runner.core.remote import HostLockedError, SshRemote
from vllmctl.transport import Result


def _remote(root: Path, sent: list[str]) -> SshRemote:
    def run(cmd: str, sudo: bool = False, timeout: float | None = None, stdin: bytes | None = None) -> Result:
        sent.append(cmd)
        local = cmd.replace("/var/lib/vllmctl", str(root))
        done = subprocess.run(["sh", "-c", local], capture_output=True, text=True, check=False)
        return Result(done.stdout, done.stderr, done.returncode)

    return SshRemote(SimpleNamespace(host=SimpleNamespace(name="h"), run=run))  # type: ignore[arg-type]


def test_a_gather_is_one_buffered_script_and_parses_its_facts(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "u.service.applied").write_text("h1\n")
    sent: list[str] = []
    facts = _remote(tmp_path, sent).begin({"applied": ()}, None, False, 30)
    assert facts == {"applied": {"u.service": "h1"}}
    assert len(sent) == 1 and sent[0].startswith("out=$(\n")


def test_the_lock_probe_still_refuses_inside_the_buffered_script(tmp_path: Path) -> None:
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "owner").write_text("ops@ctl pid=7\n")
    with pytest.raises(HostLockedError, match="ops@ctl pid=7"):
        _remote(tmp_path, []).begin({"applied": ()}, None, False, 30)
    with pytest.raises(HostLockedError, match="ops@ctl pid=7"):
        _remote(tmp_path, []).begin({"applied": ()}, "me", False, 30)  # taking it is refused too
    assert (tmp_path / "lock" / "owner").read_text() == "ops@ctl pid=7\n"
    _remote(tmp_path, []).begin({}, "me", True, 30)  # --break-lock takes it over
    assert (tmp_path / "lock" / "owner").read_text() == "me\n"
