"""The fan-out's shell: the source's line allows one read-only rsync of one folder from one address and
nothing else; the pull's check and move run here for real (bash, with `rsync` replaced by a copy from a
local folder), so a corrupt file never reaches the folder and a planted link cannot redirect a write."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from vllmctl.fanout import scripts

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEWOKLTvKe1eCZ vllmctl-fanout"


def test_the_granted_line_is_restricted_to_a_read_only_rsync_of_the_folder_from_the_target() -> None:
    line = scripts.authorized_line(KEY, "/models/my model", "10.0.0.3", "00ff00ff00ff00ff0001")
    assert line == (
        'from="10.0.0.3",command="rrsync -ro \'/models/my model\'",restrict '
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEWOKLTvKe1eCZ vllmctl-fanout-00ff00ff00ff00ff0001"
    )


@pytest.mark.parametrize(
    ("key", "address"),
    [
        ("ssh-rsa AAAAB3 x", "10.0.0.3"),
        ('ssh-ed25519 AAAA"x', "10.0.0.3"),
        (KEY, '10.0.0.3",command="sh'),
        (KEY, "host.example"),
    ],
)
def test_a_key_or_address_that_could_widen_the_line_is_refused(key: str, address: str) -> None:
    with pytest.raises(ValueError):
        scripts.authorized_line(key, "/models/m", address, "00ff00ff00ff00ff")


def test_grant_and_revoke_keep_other_copies_and_clear_earlier_runs(tmp_path: Path) -> None:
    home = tmp_path
    (home / ".ssh").mkdir()
    keys = home / ".ssh/authorized_keys"
    keys.write_text(
        "ssh-ed25519 AAAA ops@laptop\n"
        'expiry-time="202601010000",restrict ssh-ed25519 BBBB vllmctl-fanout-aaaaaaaaaaaaaaaa0001\n'
        'expiry-time="203001010000",restrict ssh-ed25519 CCCC vllmctl-fanout-bbbbbbbbbbbbbbbb0001\n'
    )
    env = {**os.environ, "HOME": str(home)}
    line = scripts.authorized_line(KEY, "/m", "10.0.0.3", "bbbbbbbbbbbbbbbb0002")
    subprocess.run(["sh", "-c", scripts.grant(line, "bbbbbbbbbbbbbbbb")], env=env, check=True)
    lines = keys.read_text().splitlines()
    assert lines[0] == "ssh-ed25519 AAAA ops@laptop"
    assert [ln.rsplit(" ", 1)[1] for ln in lines[1:]] == [
        "vllmctl-fanout-bbbbbbbbbbbbbbbb0001",  # another copy of this run: kept
        "vllmctl-fanout-bbbbbbbbbbbbbbbb0002",
    ]
    assert lines[2].startswith('expiry-time="') and lines[2].endswith(line)
    subprocess.run(["sh", "-c", scripts.revoke("bbbbbbbbbbbbbbbb0002")], env=env, check=True)
    assert keys.read_text().splitlines()[1:] == [lines[1]]


def make_pull(tmp_path: Path, served: dict[str, bytes], wanted: dict[str, bytes]) -> tuple[Path, str, dict]:
    """A source folder with `served`, a keydir listing `wanted` (the controller's sums), and a PATH whose
    rsync copies the listed files from the source folder into the incoming directory."""
    source, folder, keydir, bin_dir = (tmp_path / n for n in ("source", "folder", "keydir", "bin"))
    for path in (source, folder, keydir, bin_dir):
        path.mkdir()
    for name, data in served.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    files = [{"name": n, "sha256": hashlib.sha256(d).hexdigest()} for n, d in wanted.items()]
    (keydir / "files").write_text(scripts.names_text(files))
    (keydir / "sums").write_text(scripts.sums_text(files))
    fake = bin_dir / "rsync"
    dest = f"{folder}/{scripts.INCOMING}/"
    fake.write_text(f"#!/bin/sh\ncd {source} && tar cf - -T {keydir}/files | tar xf - -C {dest}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    script = scripts.pull(str(keydir), str(folder), "10.0.0.2", 22, "ops", str(os.getuid()), str(os.getgid()))
    return folder, script, env


def test_a_verified_pull_lands_in_the_folder_and_leaves_no_incoming_directory(tmp_path: Path) -> None:
    files = {"model.safetensors": b"weights", "sub/config.json": b"{}"}
    folder, script, env = make_pull(tmp_path, files, files)
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (folder / "sub/config.json").read_bytes() == b"{}"
    assert (folder / "model.safetensors").read_bytes() == b"weights"
    assert not (folder / scripts.INCOMING).exists()


def test_a_file_whose_sha256_does_not_match_never_reaches_the_folder(tmp_path: Path) -> None:
    folder, script, env = make_pull(
        tmp_path, {"a.bin": b"good", "b.bin": b"corrupt"}, {"a.bin": b"good", "b.bin": b"expected"}
    )
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == scripts.CORRUPT_EXIT
    assert "b.bin: FAILED" in done.stderr
    assert not (folder / "b.bin").exists() and not (folder / "a.bin").exists()
    assert not (folder / scripts.INCOMING / "b.bin").exists()  # never the basis of a later pull


def test_a_link_planted_in_the_folder_cannot_redirect_a_write(tmp_path: Path) -> None:
    files = {"sub/w.bin": b"weights"}
    folder, script, env = make_pull(tmp_path, files, files)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "sub").symlink_to(elsewhere)
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "resolves outside" in done.stderr
    assert list(elsewhere.iterdir()) == []


def test_rsync_stats_give_the_bytes_received() -> None:
    assert scripts.bytes_received("Number of files: 3\nTotal bytes received: 1,073,741,824\n") == 2**30
    assert scripts.bytes_received("") == 0
