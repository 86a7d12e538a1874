"""The wheel carries what a pip-installed vllmctl needs outside the package: the unit templates and the
playbooks (copied in by setup.py), found there by `render` and `playbooks` when run from the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
PROBE = """
import vllmctl.tasks.playbooks as p, vllmctl.render.templates as r
print(r.templates_dir()); print(p.playbooks_dir()); print(p.resolve("site"))
"""


def test_the_wheel_ships_templates_and_playbooks_and_uses_them(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)]
    built = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("vllmctl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    for folder in ("templates", "playbooks"):
        for source in (REPO / folder).iterdir():
            assert f"vllmctl/_shipped/{folder}/{source.name}" in names, source

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    ran = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    shipped = tmp_path / "site" / "vllmctl" / "_shipped"
    assert ran.stdout.split() == [
        str(shipped / "templates"),
        str(shipped / "playbooks"),
        str(shipped / "playbooks" / "site.yml"),
    ]
