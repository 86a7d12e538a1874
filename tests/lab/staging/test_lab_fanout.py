"""The weights fan-out on real hosts (#32): `apply` pushes a controller folder to one host and the others copy
it from each other with rsync over SSH. A source powered off mid-copy, a source whose file is corrupt and a
target whose disk fills each end with every live host holding a verified copy (from another source, or the
controller's push in its own run), never a copy counted as good that is not; and no access is left behind:
no one-time key on any target, no granted line on any source."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fanoutlab import FanoutLab

from vllmctl.errors import EXIT_CHANGES
from vllmctl.fanout.scripts import INCOMING
from vllmctl.lab.testing import LabHostInfo, in_mounts_of, power_off, start_fleet, stop_fleet

pytestmark = pytest.mark.lab

SHARD_BYTES = 12_000_000
STAGE = """name: stage
phases:
  - name: base
    tasks:
      - task: base_layout
  - name: models
    tasks:
      - task: model_staging
"""


@dataclass
class Fanout(FanoutLab):
    folder: Path
    sums: dict[str, str]  # name -> sha256 on the controller

    def clear(self, *hosts: LabHostInfo) -> None:
        for host in hosts:
            self.sh(host, f"sudo rm -rf {self.folder}")

    def verified(self, host: LabHostInfo) -> bool:
        names = " ".join(sorted(self.sums))
        out = self.fleet.ssh(host, f"cd {self.folder} && sudo sha256sum {names}").stdout
        seen = {name: digest for digest, name in (line.split() for line in out.splitlines())}
        return seen == self.sums


@pytest.fixture(scope="module")
def fanout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fanout]:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    name = f"pt{os.getpid()}-fan"
    work = tmp_path_factory.mktemp("fanout")
    folder = Path(f"/var/tmp/vllmctl-fanout-{os.getpid()}/model")
    try:
        shutil.copytree(ensure_tiny_model(), folder)
        for index in (1, 2):
            (folder / f"shard-{index}.bin").write_bytes(os.urandom(SHARD_BYTES))
        sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
        fleet = start_fleet(name, 4, work / "lab.yml")
        doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
        doc["models"] = {"tiny": {"source": str(folder), "hosts": fleet.name}}
        inventory = work / "fanout.yml"
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        playbook = work / "stage.yml"
        playbook.write_text(STAGE)
        yield Fanout(fleet, inventory, playbook, folder, sums)
    finally:
        stop_fleet(name)
        shutil.rmtree(folder.parent, ignore_errors=True)


def sources(doc: dict[str, Any], fanout: Fanout) -> dict[str, dict[str, Any]]:
    """Host -> how it got the folder; empty when no host needed it."""
    hosts: dict[str, dict[str, Any]] = doc["staging"].get(str(fanout.folder), {}).get("hosts", {})
    return hosts


def test_check_shows_the_rounds_and_copies_nothing(fanout: Fanout) -> None:
    first, *_ = fanout.fleet.hosts
    code, doc, stderr = fanout.apply("--check")
    assert code == EXIT_CHANGES, stderr
    assert f"fan-out {fanout.folder}: 4 hosts need it, held by no host" in stderr
    assert f"round 1: {first.name} <- controller" in stderr
    assert sources(doc, fanout) == {}
    assert fanout.sh(first, f"test -e {fanout.folder} && echo present || echo absent").strip() == "absent"
    for name, host in doc["hosts"].items():  # each host's plan: the fan-out's copy, not the controller's push
        (copy,) = [s for s in host["steps"] if s["op"] == "model_fanout"]
        (sync,) = [s for s in host["steps"] if s["op"] == "model_sync"]
        assert copy["status"] == "planned" and copy["commands"][0].startswith(f"fan-out copy {fanout.folder}")
        assert sync["noop"] and not sync["commands"], name


def test_one_copy_leaves_the_controller_and_the_hosts_copy_the_rest(fanout: Fanout) -> None:
    hosts = fanout.fleet.hosts
    code, doc, stderr = fanout.apply()
    assert code == 0, stderr
    copies = sources(doc, fanout)
    assert sorted(copies) == sorted(h.name for h in hosts)
    assert [c["source"] for c in copies.values()].count("controller") == 1
    assert all(c["status"] == "ok" and c["bytes"] >= 2 * SHARD_BYTES for c in copies.values())
    assert all(fanout.verified(h) for h in hosts)
    fanout.assert_no_access_left(*hosts)
    for host in doc["hosts"].values():  # the copy counts as the host's change; its own push had nothing to do
        assert [s["status"] for s in host["steps"] if s["op"] == "model_fanout"] == ["changed"]
        assert all(s["noop"] for s in host["steps"] if s["op"] == "model_sync")
    code, again, stderr = fanout.apply()
    assert code == 0, stderr
    assert again["staging"] == {}  # every host holds it: nothing to fan out
    assert {h: r["recap"]["changed"] for h, r in again["hosts"].items()} == {h.name: 0 for h in hosts}


def test_a_host_outside_limit_that_holds_the_folder_is_a_source(fanout: Fanout) -> None:
    holder, *others = fanout.fleet.hosts
    fanout.clear(*others)
    code, doc, stderr = fanout.apply("--limit", ",".join(h.name for h in others))
    assert code == 0, stderr
    assert f"held by {holder.name}" in stderr
    copies = sources(doc, fanout)
    assert sorted(copies) == sorted(h.name for h in others)
    assert "controller" not in {c["source"] for c in copies.values()}  # the controller's link is spared
    assert all(fanout.verified(h) for h in others)
    fanout.assert_no_access_left(*fanout.fleet.hosts)


def test_a_source_whose_file_is_corrupt_is_caught_and_copied_again(fanout: Fanout) -> None:
    holder, *others = fanout.fleet.hosts
    assert fanout.verified(holder)
    fanout.clear(*others)
    # the same size, one byte changed, its manifest untouched: only a sha256 check can tell
    fanout.sh(
        holder, f"printf X | sudo dd of={fanout.folder}/shard-1.bin bs=1 seek=4096 conv=notrunc status=none"
    )
    code, doc, stderr = fanout.apply()
    assert code == 0, stderr
    copies = sources(doc, fanout)
    caught = [c for c in copies.values() if any("corrupt" in a for a in c["attempts"])]
    assert caught and all(a.startswith(f"{holder.name}: ") for c in caught for a in c["attempts"])
    assert copies[holder.name]["status"] == "ok" and copies[holder.name]["source"] != holder.name
    assert all(fanout.verified(h) for h in fanout.fleet.hosts)
    fanout.assert_no_access_left(*fanout.fleet.hosts)


def test_a_target_whose_disk_fills_fails_its_copy_and_gets_the_controllers_push(fanout: Fanout) -> None:
    others = fanout.fleet.hosts[1:]
    full = others[-1]
    fanout.clear(*others)
    incoming = f"{fanout.folder}/{INCOMING}"
    in_mounts_of(
        fanout.fleet, full, ["sh", "-c", f"mkdir -p {incoming} && mount -t tmpfs -o size=4m tmpfs {incoming}"]
    )
    try:
        code, doc, stderr = fanout.apply()
    finally:
        in_mounts_of(fanout.fleet, full, ["umount", incoming])
    assert code == 0, stderr
    copies = sources(doc, fanout)
    assert copies[full.name]["status"] == "failed" and "disk full" in copies[full.name]["error"]
    assert all(copies[h.name]["status"] == "ok" for h in others[:-1])
    assert all(fanout.verified(h) for h in fanout.fleet.hosts)  # `full` by the push of its own run
    fanout.assert_no_access_left(*fanout.fleet.hosts)


def test_a_source_powered_off_mid_copy_leaves_its_targets_to_other_sources(fanout: Fanout) -> None:
    holder, *others = fanout.fleet.hosts
    fanout.clear(*others)
    netns = f"/run/netns/vllmctl-{fanout.fleet.name}-1"
    slow = ["nsenter", f"--net={netns}", "tc", "qdisc", "add", "dev", "eth0", "root", "tbf"]
    subprocess.run([*slow, "rate", "8mbit", "burst", "32kb", "latency", "400ms"], check=True)
    argv = ["apply", str(fanout.inventory), "--playbook", str(fanout.playbook), "--yes", "--json"]
    env = {**os.environ, "NO_COLOR": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "vllmctl", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as running:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            sizes = fanout.fleet.ssh(others[0], f"sudo du -sb {fanout.folder}/{INCOMING} 2>/dev/null").stdout
            if sizes and int(sizes.split()[0]) > 1_000_000:
                break
            time.sleep(0.5)
        else:
            running.kill()
            pytest.fail("no copy from the holder started")
        power_off(fanout.fleet, holder)
        stdout, stderr = running.communicate(timeout=900)
    doc = json.loads(stdout)
    copies = sources(doc, fanout)
    cut = [c for c in copies.values() if any(a.startswith(f"{holder.name}: ") for a in c["attempts"])]
    assert cut, stderr
    assert all(copies[h.name]["status"] == "ok" and copies[h.name]["source"] != holder.name for h in others)
    assert all(fanout.verified(h) for h in others)
    fanout.assert_no_access_left(*others)
    assert doc["hosts"][holder.name]["status"] != "ok"  # its own run cannot reach it: reported, not hidden
    assert all(doc["hosts"][h.name]["status"] == "ok" for h in others)
