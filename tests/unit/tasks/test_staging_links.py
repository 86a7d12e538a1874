"""Symlinks in a local model directory: one that leaves the directory is refused by name (a model folder
must not push this machine's SSH key to every host); one that stays inside is pushed as the file it names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from vllmctl.errors import InputError
from vllmctl.facts.disk import MODEL_MANIFESTS, manifest_command
from vllmctl.runner.fleet.staging import local_manifest, sha256_file


@pytest.fixture
def model(tmp_path: Path) -> Path:
    root = tmp_path / "models" / "tiny"
    (root / "v2").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "v2" / "w.bin").write_bytes(b"weights")
    secret = tmp_path / "home" / ".ssh" / "id_ed25519"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    return root


def test_a_link_to_a_file_outside_is_refused_by_name(model: Path, tmp_path: Path) -> None:
    (model / "tokenizer.json").symlink_to(tmp_path / "home" / ".ssh" / "id_ed25519")
    with pytest.raises(InputError) as caught:
        local_manifest(str(model), tmp_path / "c.json")
    assert "tokenizer.json is a symlink to" in caught.value.message and "outside" in caught.value.message
    assert "id_ed25519" in caught.value.message and "cp -L" in caught.value.hint


@pytest.mark.parametrize("target", ["../../home/.ssh", "/etc", ".."])
def test_a_link_to_a_directory_outside_is_refused(model: Path, target: str, tmp_path: Path) -> None:
    (model / "extra").symlink_to(target)
    with pytest.raises(InputError, match=r"extra is a symlink to .*outside the model directory"):
        local_manifest(str(model), tmp_path / "c.json")


def test_relative_escapes_through_an_inside_link_are_refused(model: Path, tmp_path: Path) -> None:
    (model / "v2" / "up").symlink_to("../../../home/.ssh/id_ed25519")
    with pytest.raises(InputError, match="v2/up is a symlink"):
        local_manifest(str(model), tmp_path / "c.json")


def test_dangling_links_and_loops_are_refused(model: Path, tmp_path: Path) -> None:
    (model / "gone").symlink_to("missing.bin")
    with pytest.raises(InputError, match=r"gone is a symlink to .* which does not exist"):
        local_manifest(str(model), tmp_path / "c.json")
    (model / "gone").unlink()
    (model / "v2" / "loop").symlink_to("..")
    with pytest.raises(InputError, match="v2/loop is a symlink to a directory that contains it"):
        local_manifest(str(model), tmp_path / "c.json")


def test_links_inside_are_pushed_as_the_files_they_name(model: Path, tmp_path: Path) -> None:
    (model / "weights").symlink_to("v2")
    (model / "model.bin").symlink_to("v2/w.bin")
    files = local_manifest(str(model), tmp_path / "c.json")
    assert files is not None
    by_name = {f["name"]: f for f in files}
    assert sorted(by_name) == ["config.json", "model.bin", "v2/w.bin", "weights/w.bin"]
    real = model.resolve() / "v2" / "w.bin"
    for name in ("model.bin", "v2/w.bin", "weights/w.bin"):
        assert by_name[name]["source"] == str(real)  # the real file is read, never the link
        assert by_name[name]["sha256"] == sha256_file(real) and by_name[name]["size"] == 7


def test_the_host_sees_the_same_names_and_sizes_the_controller_hashed(model: Path, tmp_path: Path) -> None:
    """The pushed copies are regular files: the host's `seen` (find -type f) matches the manifest, so a
    second apply is a no-op rather than a re-push of every linked file."""
    (model / "model.bin").symlink_to("v2/w.bin")
    files = local_manifest(str(model), tmp_path / "c.json")
    assert files is not None
    host = tmp_path / "host"
    for f in files:
        (host / f["name"]).parent.mkdir(parents=True, exist_ok=True)
        (host / f["name"]).write_bytes(Path(f["source"]).read_bytes())
    out = subprocess.run(
        ["bash", "-c", manifest_command((str(host),))], capture_output=True, text=True
    ).stdout
    seen = MODEL_MANIFESTS.parse(out, 0)[str(host)]["seen"]
    assert seen == {f["name"]: f["size"] for f in files}


def test_the_link_check_does_not_depend_on_how_the_directory_is_named(model: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(model)  # a source path that is itself a link is fine; links inside are judged by it
    (model / "model.bin").symlink_to(os.path.relpath(model / "v2" / "w.bin", model))
    files = local_manifest(str(alias), tmp_path / "c.json")
    assert files is not None and {f["name"] for f in files} >= {"model.bin", "v2/w.bin"}
