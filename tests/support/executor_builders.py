"""Small builders for Inventory dataclasses, so executor tests do not depend on the YAML loader."""

from __future__ import annotations

from typing import Any

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
