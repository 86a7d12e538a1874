"""Host facts: each is a remote command plus a pure parser; all of a host's facts travel in one script."""

from __future__ import annotations

from vllmctl.facts.base import Fact
from vllmctl.facts.gpu import GPU_PROCESSES, GPU_TOPOLOGY, GPUS
from vllmctl.facts.gpu_health import GPU_HEALTH
from vllmctl.facts.lock import LOCK
from vllmctl.facts.provision import PROVISION_FACTS
from vllmctl.facts.state import (
    APPLIED,
    ENGINE_VENVS,
    PATHS,
    RELEASE_VENVS,
    RELEASES,
    SERVICES,
    UNIT_FILES,
    UNITS,
    USERS,
)
from vllmctl.facts.system import KERNEL, OS_RELEASE, PYTHON, RESOURCES

FACTS: dict[str, Fact] = {
    fact.name: fact
    for fact in (
        GPUS,
        GPU_PROCESSES,
        GPU_TOPOLOGY,
        GPU_HEALTH,
        OS_RELEASE,
        KERNEL,
        RESOURCES,
        PYTHON,
        ENGINE_VENVS,
        UNITS,
        SERVICES,
        UNIT_FILES,
        APPLIED,
        RELEASES,
        RELEASE_VENVS,
        LOCK,
        PATHS,
        USERS,
    )
} | PROVISION_FACTS

HOST_FACTS = (
    "gpus",
    "gpu_topology",
    "gpu_health",
    "os_release",
    "kernel",
    "resources",
    "python",
    "engine_venvs",
)

__all__ = ["FACTS", "HOST_FACTS", "Fact"]
