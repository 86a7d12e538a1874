"""A hub model's copy from host to host (#32), run here for real against a stand-in hub over HTTP: the seed's
download with huggingface_hub, the controller's listing of the hub, the pull's sha256 and git checks (with
`rsync` replaced by a copy from the seed's cache folder) and the layout; then huggingface_hub finds every file
cached on the target and fetches none. A corrupt blob never reaches the target's cache."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from vllmctl.fanout import hub, scripts
from vllmctl.inventory import load_inventory
from vllmctl.lab.hubstandin import HubRepo, HubStandIn
from vllmctl.render.quoting import QuotingError
from vllmctl.runner.fanout.hub import hub_listing
from vllmctl.tasks.desired import HostContext

REPO = "org/tiny"
INVENTORY = """vllmctl: 1
hosts:
  a: {{address: 10.0.0.1}}
defaults:
  vars: {{env: {{HF_ENDPOINT: "{url}"}}}}
models:
  tiny: {{source: {repo}, hosts: [a]}}
"""


@pytest.fixture
def standin(tmp_path: Path) -> HubStandIn:
    folder = tmp_path / "repo"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "model.safetensors").write_bytes(os.urandom(65536))
    (folder / "sub" / "extra.bin").write_bytes(os.urandom(4096))
    return HubStandIn(HubRepo(REPO, folder))


def listed(tmp_path: Path, standin: HubStandIn) -> hub.HubSnapshot:
    inventory = tmp_path / "inv.yml"
    inventory.write_text(INVENTORY.format(url=standin.url, repo=REPO))
    inv = load_inventory(inventory)
    return hub_listing(REPO, "main", HostContext(inv, inv.hosts["a"]))


def download(cache: Path, standin: HubStandIn) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(REPO, cache_dir=str(cache), endpoint=standin.url))


def pull_into(tmp_path: Path, source: Path, snapshot: hub.HubSnapshot) -> tuple[Path, Path, dict[str, str]]:
    """The target's hub folder, the key directory a copy fills, and a PATH whose rsync copies `source`."""
    folder, keydir, bin_dir = tmp_path / "target" / source.name, tmp_path / "keydir", tmp_path / "bin"
    for path in (folder, keydir, bin_dir):
        path.mkdir(parents=True)
    blobs = snapshot.blobs()
    extra = [("git_check.py", hub.GIT_CHECK), ("lay_out.py", hub.LAY_OUT), (hub.LINKS, snapshot.links_json())]
    extra.append((hub.GIT_SUMS, hub.git_sums(snapshot, (str(b["name"]) for b in blobs))))
    for name, text in [("files", scripts.names_text(blobs)), ("sums", scripts.sums_text(blobs)), *extra]:
        (keydir / name).write_text(text)
    fake = bin_dir / "rsync"
    dest = f"{folder}/{scripts.INCOMING}/"
    fake.write_text(f"#!/bin/sh\ncd {source} && tar chf - -T {keydir}/files | tar xf - -C {dest}\n")
    fake.chmod(0o755)
    return folder, keydir, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)


def seeded(tmp_path: Path, standin: HubStandIn) -> tuple[Path, hub.HubSnapshot]:
    """The seed's snapshot folder, downloaded with huggingface_hub, and the hub's listing read as the
    controller reads it."""
    with standin:
        return download(tmp_path / "seed", standin), listed(tmp_path, standin)


def pull(keydir: Path, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    uid, gid = str(os.getuid()), str(os.getgid())
    return run(scripts.pull(str(keydir), str(folder), "10.0.0.2", 22, "ops", uid, gid), env)


def test_a_copy_checked_and_laid_out_is_found_cached_and_fetches_nothing(
    tmp_path: Path, standin: HubStandIn
) -> None:
    seed, snapshot = seeded(tmp_path, standin)
    source = seed.parents[1]  # .../models--org--tiny
    assert snapshot.commit == standin.repo.commit and source.name == "models--org--tiny"
    # the hub's listing names the blobs exactly as huggingface_hub stored them on the seed
    assert {b["name"] for b in snapshot.blobs()} == {f"blobs/{p.name}" for p in (source / "blobs").iterdir()}
    folder, keydir, env = pull_into(tmp_path, source, snapshot)
    pulled = pull(keydir, folder, env)
    assert pulled.returncode == 0, pulled.stderr
    laid = run(hub.lay_out(str(keydir), str(folder)))
    assert laid.returncode == 0, laid.stderr
    again = run(hub.lay_out(str(keydir), str(folder)))  # over its own links: a repaired holder's case
    assert again.returncode == 0, again.stderr
    marker, link = tmp_path / "staged" / "tiny+lora+a", tmp_path / "adapters" / "a"
    staged = [(str(marker), f"{REPO}@main -> {link}\n", str(link))]
    stamped = run(hub.stamp(str(folder), snapshot.commit, staged))
    assert stamped.returncode == 0, stamped.stderr
    assert marker.read_text() == f"{REPO}@main -> {link}\n"  # what the host's own run would have written
    assert link.resolve() == (folder / "snapshots" / snapshot.commit).resolve()
    with HubStandIn(standin.repo) as fresh:  # a new server: every request it gets is the target's
        found = download(tmp_path / "target", fresh)
    # no file's bytes, not even a HEAD: every file was found in the copied cache
    assert [what for _, _, what in fresh.log] == ["info", "tree"]
    assert (folder / "refs" / "main").read_text() == standin.repo.commit
    for name, path in standin.repo.paths.items():
        assert (found / name).read_bytes() == path.read_bytes()
        assert (found / name).is_symlink()
    assert not any(p.is_symlink() for p in (folder / "blobs").iterdir())  # blobs are files, never links


def test_a_corrupt_git_kept_file_on_the_source_is_caught_by_its_git_blob_id(
    tmp_path: Path, standin: HubStandIn
) -> None:
    seed, snapshot = seeded(tmp_path, standin)
    source = seed.parents[1]
    config = (seed / "config.json").resolve()
    config.write_text('{"model_type": "LLAMA"}')  # the same size: only a hash can tell
    folder, keydir, env = pull_into(tmp_path, source, snapshot)
    pulled = pull(keydir, folder, env)
    assert pulled.returncode == scripts.CORRUPT_EXIT
    assert hub.failed_blobs(pulled.stderr) == [f"blobs/{config.name}"]
    assert not (folder / "blobs").exists()  # nothing moved in: the other blobs wait for a good source
    assert not (folder / scripts.INCOMING / "blobs" / config.name).exists()


def test_a_corrupt_lfs_file_is_caught_by_the_sha256_the_hub_named_it_by(
    tmp_path: Path, standin: HubStandIn
) -> None:
    seed, snapshot = seeded(tmp_path, standin)
    weights = (seed / "model.safetensors").resolve()
    data = bytearray(weights.read_bytes())
    data[100] ^= 1
    weights.write_bytes(bytes(data))
    assert weights.name == standin.repo.sha256("model.safetensors")
    folder, keydir, env = pull_into(tmp_path, seed.parents[1], snapshot)
    pulled = pull(keydir, folder, env)
    assert pulled.returncode == scripts.CORRUPT_EXIT
    assert hub.failed_blobs(pulled.stderr) == [f"blobs/{weights.name}"]


@pytest.mark.parametrize(
    ("path", "commit", "blob_id", "lfs"),
    [
        ("../etc/passwd", "a" * 40, "b" * 40, ""),
        ("/etc/passwd", "a" * 40, "b" * 40, ""),
        ("ok.json", "main", "b" * 40, ""),
        ("ok.json", "a" * 40, "../x", ""),
        ("ok.bin", "a" * 40, "b" * 40, "c" * 63),
    ],
)
def test_a_listing_whose_names_or_hashes_could_escape_the_cache_is_refused(
    path: str, commit: str, blob_id: str, lfs: str
) -> None:
    with pytest.raises(ValueError):
        hub.snapshot_from(
            REPO, "main", commit, [{"path": path, "size": 1, "blob_id": blob_id, "lfs_sha256": lfs}]
        )


def test_a_revision_that_would_write_a_ref_outside_the_cache_is_refused() -> None:
    with pytest.raises(ValueError):
        hub.snapshot_from(REPO, "../../x", "a" * 40, [{"path": "a", "size": 1, "blob_id": "b" * 40}])


def test_the_layout_refuses_a_link_outside_the_folder(tmp_path: Path) -> None:
    folder, keydir = tmp_path / "models--org--tiny", tmp_path / "keydir"
    folder.mkdir()
    keydir.mkdir()
    (keydir / "lay_out.py").write_text(hub.LAY_OUT)
    (keydir / hub.LINKS).write_text(
        '{"commit": "%s", "revision": "main", "links": [["../../../x", "b"]]}' % ("a" * 40)
    )
    laid = run(hub.lay_out(str(keydir), str(folder)))
    assert laid.returncode != 0 and "not writing outside" in laid.stderr
    assert not (tmp_path / "x").exists()


def test_a_source_found_corrupt_forgets_its_markers_and_the_failed_blobs_only() -> None:
    script = hub.forget(
        "/var/lib/vllmctl/models/hub/models--org--tiny", ["/m/.vllmctl-staged/tiny"], ["blobs/" + "a" * 40]
    )
    assert script == (
        "rm -f -- /m/.vllmctl-staged/tiny /var/lib/vllmctl/models/hub/models--org--tiny/blobs/" + "a" * 40
    )
    with pytest.raises(QuotingError):
        hub.forget("/var/lib/vllmctl/models/hub/models--org--tiny", [], ["../../x"])
