"""model_sync run for real on this machine's disk (the destination is an absolute path, so a temp dir is a
host): names read back from the host's manifest never delete outside the destination, even through a
symlink planted in it, and an existing destination keeps its mode."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from vllmctl.facts.disk import MODEL_MANIFESTS, manifest_command
from vllmctl.ops import Command, Step, Upload
from vllmctl.ops.model_stage import MODEL_SYNC, PushFile
from vllmctl.runner.fleet.staging import local_manifest


def _sync(source: Path, dest: Path, cache: Path) -> Step:
    """Gather the manifest fact with a real shell, plan, run every action; returns the planned step."""
    gathered = subprocess.run(["bash", "-c", manifest_command((str(dest),))], capture_output=True, text=True)
    facts = {"model_manifests": MODEL_MANIFESTS.parse(gathered.stdout, gathered.returncode), "disk_free": {}}
    step = MODEL_SYNC({"dest": str(dest), "files": local_manifest(str(source), cache)}, facts)
    for action in step.actions:
        _run(action)
    return step


def _run(action: Any) -> None:
    if isinstance(action, Command):
        done = subprocess.run(["bash", "-c", action.render()], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    elif isinstance(action, Upload):
        Path(action.path).write_text(action.content)
    else:
        assert isinstance(action, PushFile)
        shutil.copyfile(action.source, action.path)


def test_host_manifest_names_outside_the_destination_are_never_deleted(tmp_path: Path) -> None:
    source, dest, cache = tmp_path / "ctl" / "model", tmp_path / "host" / "srv" / "m", tmp_path / "c.json"
    (source / "sub").mkdir(parents=True)
    for name in ("config.json", "sub/w.bin", "old.bin"):
        (source / name).write_text(name)
    _sync(source, dest, cache)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        ".vllmctl-manifest", "config.json", "old.bin", "sub/w.bin",
    ]  # fmt: skip

    victims = {name: tmp_path / "host" / name for name in ("sudoers", "shadow", "outside/key")}
    for victim in victims.values():
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_text("precious")
    (dest / "link").symlink_to(tmp_path / "host" / "outside")  # someone with write access to the dest
    record = "e" * 64 + "  8  "
    with (dest / ".vllmctl-manifest").open("a") as manifest:
        manifest.write(f"{record}../../sudoers\n{record}{victims['shadow']}\n{record}link/key\n")
    (source / "old.bin").unlink()

    step = _sync(source, dest, cache)
    assert all(victim.read_text() == "precious" for victim in victims.values())
    assert not (dest / "old.bin").exists() and (dest / "config.json").exists()
    assert [w.split(": ")[0] for w in step.warnings] == [
        f"{dest}/.vllmctl-manifest on the host names '../../sudoers'",
        f"{dest}/.vllmctl-manifest on the host names '{victims['shadow']}'",
    ]
    assert "../" not in (dest / ".vllmctl-manifest").read_text()  # the rewritten manifest drops them
    assert _sync(source, dest, cache).noop is not None


def test_an_existing_destination_keeps_its_mode(tmp_path: Path) -> None:
    source, dest = tmp_path / "model", tmp_path / "shared"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "w.bin").write_text("w")
    dest.mkdir(mode=0o750)
    dest.chmod(0o750)
    _sync(source, dest, tmp_path / "c.json")
    assert (dest.stat().st_mode & 0o777, (dest / "sub").stat().st_mode & 0o777) == (0o750, 0o755)
    # the check is honest: what main ran (install -d -m 0755) re-modes an existing directory
    subprocess.run(["install", "-d", "-m", "0755", str(dest)], check=True)
    assert dest.stat().st_mode & 0o777 == 0o755
