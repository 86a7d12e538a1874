"""The provisioning facts (driver packages, what apt offers, free disk, staged-model manifests) by name."""

from __future__ import annotations

from vllmctl.facts.base import Fact
from vllmctl.facts.disk import DISK_FREE, MODEL_MANIFESTS
from vllmctl.facts.packages import APT_VERSIONS, DPKG, DRIVER_PACKAGES

PROVISION_FACTS: dict[str, Fact] = {
    fact.name: fact for fact in (DRIVER_PACKAGES, DPKG, APT_VERSIONS, DISK_FREE, MODEL_MANIFESTS)
}
