"""Small builders for Inventory dataclasses, so executor tests do not depend on the YAML loader."""

from __future__ import annotations

import io
from typing import Any

import paramiko

from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
)


def host(name: str, address: str = "10.0.0.1", **ssh: Any) -> Host:
    return Host(
        name=name,
        address=address,
        ssh=SshSettings(user="ops", **ssh),
        gpus=GpuSpec("H100-80GB", 2),
        driver=DriverSpec(),
        engine=EngineSpec(),
    )


def inventory(
    names: list[str],
    models: dict[str, ModelDeployment] | None = None,
    groups: dict[str, tuple[str, ...]] | None = None,
) -> Inventory:
    hosts = {name: host(name, f"10.0.0.{i + 1}") for i, name in enumerate(names)}
    return Inventory(path="test.yml", hosts=hosts, groups=groups or {}, models=models or {})


def model(name: str, hosts: tuple[str, ...], source: str = "/srv/models/tiny", **kw: Any) -> ModelDeployment:
    return ModelDeployment(name=name, source=source, hosts=hosts, **kw)


def parsed(text: str) -> paramiko.SSHConfig:
    """An ssh_config from text."""
    config = paramiko.SSHConfig()
    config.parse(io.StringIO(text))
    return config


def loaded(address: str, given: set[str], **ssh: Any) -> Host:
    """A host as the loader builds it: `given` names the ssh keys the inventory set."""
    made = host("h", address, **ssh)
    settings = type(made.ssh)(**{**made.ssh.__dict__, "given": frozenset(given)})
    return type(made)(**{**made.__dict__, "ssh": settings})
