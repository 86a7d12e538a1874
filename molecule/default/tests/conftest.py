"""Testinfra hosts for the Molecule verifier: paramiko with the lab's known_hosts and RejectPolicy.

testinfra's own paramiko backend accepts unknown host keys with a warning, so the client is built here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
import testinfra
import yaml
from testinfra.backend.paramiko import ParamikoBackend


def _inventory() -> dict[str, Any]:
    path = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "vllmctl-inventory.yml"
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


INVENTORY = _inventory()
SSH = INVENTORY["defaults"]["ssh"]


def strict_client(address: str) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(SSH["known_hosts"])
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        address,
        port=SSH["port"],
        username=SSH["user"],
        key_filename=SSH["identity_file"],
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    return client


@pytest.fixture(params=sorted(INVENTORY["hosts"]), scope="module")
def host(request: pytest.FixtureRequest) -> Iterator[Any]:
    spec = INVENTORY["hosts"][request.param]
    backend = ParamikoBackend(f"paramiko://{SSH['user']}@{spec['address']}")
    backend.__dict__["client"] = strict_client(spec["address"])  # fills testinfra's cached property
    yield testinfra.host.Host(backend)
    backend.client.close()


@pytest.fixture
def host_spec(host: Any) -> dict[str, Any]:
    by_address = {spec["address"]: spec for spec in INVENTORY["hosts"].values()}
    spec: dict[str, Any] = by_address[host.backend.host.name]
    return spec


@pytest.fixture
def index_url() -> str:
    url: str = INVENTORY["defaults"]["engine"]["index_url"]
    return url
