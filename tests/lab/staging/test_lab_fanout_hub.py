"""The hub model fan-out on real hosts (#32): four lab hosts stage one hub model from a stand-in hub (HTTP on
the controller, vllmctl/lab/hubstandin.py). The seed's own run downloads it, alone and first; the others
copy it from hosts that hold it with rsync over SSH, each blob checked against the hub's listing, laid out
as huggingface_hub's cache and marked staged: the weights leave the hub once, and only the seed asks it.
A corrupt blob on one source is caught and the copy taken from another; no access is left behind."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from fanoutlab import FanoutLab
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.errors import EXIT_CHANGES
from vllmctl.lab.hubstandin import HubRepo, HubStandIn
from vllmctl.lab.testing import LabHostInfo, start_fleet, stop_fleet
from vllmctl.paths import HUB_CACHE

pytestmark = pytest.mark.lab

REPO = "org/tiny"
FOLDER = f"{HUB_CACHE}/models--org--tiny"
WEIGHTS = ("model.safetensors", "shard-1.bin")
STAGE = """name: stage-hub
phases:
  - name: base
    tasks:
      - task: base_layout
  - name: engine
    regather: true
    tasks:
      - task: engine_install
  - name: models
    tasks:
      - task: model_env_files
      - task: model_staging
"""


@dataclass
class HubFan(FanoutLab):
    hub: HubStandIn

    def weights_downloaded(self) -> int:
        return sum(self.hub.file_downloads(name) for name in WEIGHTS)

    def clear(self, *hosts: LabHostInfo) -> None:
        for host in hosts:
            self.sh(host, f"sudo rm -rf {FOLDER} {HUB_CACHE}/.vllmctl-staged/tiny")

    def verified(self, host: LabHostInfo) -> bool:
        """Every file of the snapshot, read through huggingface_hub's links, as the hub serves it."""
        snapshot = f"{FOLDER}/snapshots/{self.hub.repo.commit}"
        names = " ".join(sorted(self.hub.repo.paths))
        out = self.fleet.ssh(host, f"cd {snapshot} && sudo sha256sum {names}").stdout
        seen = {name: digest for digest, name in (line.split() for line in out.splitlines())}
        return seen == {name: self.hub.repo.sha256(name) for name in self.hub.repo.paths}


@pytest.fixture(scope="module")
def hubfan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubFan]:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    name = f"pt{os.getpid()}-hub"
    work = tmp_path_factory.mktemp("hubfan")
    folder = Path(f"/var/tmp/vllmctl-hubfan-{os.getpid()}/repo")
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HF_HOME")}
    hub: HubStandIn | None = None
    try:
        shutil.copytree(ensure_tiny_model(), folder)
        (folder / "shard-1.bin").write_bytes(os.urandom(8_000_000))
        version, _wheel = ensure_standin_wheel()
        fleet = start_fleet(name, 4, work / "lab.yml")
        hub = HubStandIn(HubRepo(REPO, folder), urlparse(fleet.index_url).hostname or "").__enter__()
        os.environ.update(
            HF_ENDPOINT=hub.url, HF_HOME=str(work / "controller-hf")
        )  # the planner's config.json
        doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
        engine = {"name": "vllm", "package": PACKAGE, "version": version, "index_url": fleet.index_url}
        doc["defaults"]["engine"] = engine
        doc["defaults"].setdefault("vars", {})["env"] = {"HF_ENDPOINT": hub.url}
        doc["models"] = {"tiny": {"source": REPO, "hosts": fleet.name}}
        inventory = work / "hubfan.yml"
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        playbook = work / "stage-hub.yml"
        playbook.write_text(STAGE)
        yield HubFan(fleet, inventory, playbook, hub)
    finally:
        if hub is not None:
            hub.__exit__(None, None, None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop_fleet(name)
        shutil.rmtree(folder.parent, ignore_errors=True)


def staging(doc: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = doc["staging"].get(FOLDER, {})
    return found


def test_check_names_the_seed_and_the_rounds_and_downloads_nothing(hubfan: HubFan) -> None:
    seed, *others = hubfan.fleet.hosts
    code, doc, stderr = hubfan.apply("--check")
    assert code == EXIT_CHANGES, stderr
    assert f"fan-out {REPO}@main: 3 hosts need it, held by no host; {seed.name} downloads it" in stderr
    assert f"round 1: {others[0].name} <- {seed.name}" in stderr
    assert hubfan.weights_downloaded() == 0
    for host in others:  # each copy is in the host's plan, with the blobs and bytes the hub lists
        (copy,) = [s for s in doc["hosts"][host.name]["steps"] if s["op"] == "model_fanout"]
        assert copy["status"] == "planned" and copy["commands"][0].startswith(f"fan-out copy {FOLDER} from ")
        (download,) = [s for s in doc["hosts"][host.name]["steps"] if s["op"] == "model_download"]
        assert download["noop"] and not download["commands"], download  # the copy marks it staged
    assert not [s for s in doc["hosts"][seed.name]["steps"] if s["op"] == "model_fanout"]


def test_the_weights_leave_the_hub_once_and_the_hosts_copy_them_from_each_other(hubfan: HubFan) -> None:
    seed, *others = hubfan.fleet.hosts
    code, doc, stderr = hubfan.apply()
    assert code == 0, stderr
    found = staging(doc)
    assert found["seed"] == seed.name and found["commit"] == hubfan.hub.repo.commit
    assert sorted(found["hosts"]) == sorted(h.name for h in others)
    assert all(c["status"] == "ok" and c["bytes"] >= 8_000_000 for c in found["hosts"].values())
    assert {c["source"] for c in found["hosts"].values()} <= {h.name for h in hubfan.fleet.hosts}
    assert {name: hubfan.hub.file_downloads(name) for name in WEIGHTS} == dict.fromkeys(WEIGHTS, 1)
    assert all(hubfan.verified(h) for h in hubfan.fleet.hosts)
    for host in others:  # the copy wrote the marker its own download would have: nothing left to do
        steps = {s["op"]: s["status"] for s in doc["hosts"][host.name]["steps"]}
        assert steps["model_fanout"] == "changed" and steps["model_download"] == "ok"
    seed_address, controller = seed.address, urlparse(hubfan.fleet.index_url).hostname
    assert {client for client, _, _ in hubfan.hub.log} == {seed_address, controller}  # no target asked
    hubfan.assert_no_access_left()
    asked = len(hubfan.hub.log)
    code, again, stderr = hubfan.apply()
    assert code == 0, stderr
    assert again["staging"] == {}  # every host holds it: nothing to fan out
    assert hubfan.hub.log[asked:] == []  # nor is the hub's listing read: nothing asked of the hub at all
    assert {h: r["recap"]["changed"] for h, r in again["hosts"].items()} == {
        h.name: 0 for h in hubfan.fleet.hosts
    }
    assert hubfan.weights_downloaded() == 2


def test_a_corrupt_blob_on_one_source_is_caught_and_copied_from_another(hubfan: HubFan) -> None:
    bad, good, *others = hubfan.fleet.hosts
    assert hubfan.verified(bad) and hubfan.verified(good)
    hubfan.clear(*others)
    blob = hubfan.hub.repo.sha256("shard-1.bin")
    # the same size, one byte changed, its marker untouched: only the hub's sha256 can tell
    hubfan.sh(bad, f"printf X | sudo dd of={FOLDER}/blobs/{blob} bs=1 seek=4096 conv=notrunc status=none")
    code, doc, stderr = hubfan.apply()
    assert code == 0, stderr
    copies = staging(doc)["hosts"]
    caught = [c for c in copies.values() if any("corrupt" in a for a in c["attempts"])]
    # every copy's attempts and the run's report, should a copy from the bad source fail another way
    from_bad = all(a.startswith(f"{bad.name}: ") for c in caught for a in c["attempts"])
    assert caught and from_bad, (copies, stderr)
    assert copies[bad.name]["status"] == "ok" and copies[bad.name]["source"] != bad.name  # repaired
    assert all(copies[h.name]["status"] == "ok" for h in others)
    assert all(hubfan.verified(h) for h in hubfan.fleet.hosts)
    assert hubfan.weights_downloaded() == 2, hubfan.hub.log  # nothing came from the hub again
    hubfan.assert_no_access_left()


def test_a_seed_whose_run_fails_leaves_each_host_to_its_own_download(hubfan: HubFan) -> None:
    seed, *others = hubfan.fleet.hosts
    hubfan.clear(*hubfan.fleet.hosts)
    hubfan.sh(seed, f"sudo touch {FOLDER}")  # a file where the seed's download makes its folder: it fails
    before = hubfan.weights_downloaded()
    try:
        code, doc, stderr = hubfan.apply()
    finally:
        hubfan.sh(seed, f"sudo rm -f {FOLDER}")
    assert code != 0 and doc["hosts"][seed.name]["status"] == "failed", stderr
    found = staging(doc)
    assert found["seed"] == seed.name and found["hosts"] == {}  # no copy was made, none counted
    assert all(f"the seed {seed.name} holds no copy" in found["skipped"][h.name] for h in others)
    for host in others:
        assert doc["hosts"][host.name]["status"] == "ok"
        assert not [s for s in doc["hosts"][host.name]["steps"] if s["op"] == "model_fanout"]
        assert hubfan.verified(host)
    assert hubfan.weights_downloaded() == before + 2 * len(others)  # each downloaded its own, as before
    hubfan.assert_no_access_left()
