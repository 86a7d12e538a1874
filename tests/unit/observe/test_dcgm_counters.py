"""The DCGM fields the dashboard and alerts read are all in the counters file the dcgm_exporter op writes;
the packaged defaults lack exactly the extras it adds."""

from __future__ import annotations

import re

from vllmctl.inventory.model import Inventory
from vllmctl.observe.alerts import rules, to_yaml
from vllmctl.observe.dashboard import build, to_json
from vllmctl.ops.dcgm import DEFAULT_COUNTERS, EXPORTER_COUNTERS, EXTRA_COUNTERS

FIELD = re.compile(r"\bDCGM_FI_[A-Z0-9_]+")


def test_every_dcgm_field_read_is_exported(fleet: Inventory) -> None:
    read = set(FIELD.findall(to_yaml(rules(fleet)))) | set(FIELD.findall(to_json(build(fleet))))
    assert len(read) >= 8  # the GPU panels and rules were generated
    exported = {line.split(",")[0] for line in EXPORTER_COUNTERS.splitlines()}
    assert read <= exported, read - exported
    defaults = {field for field, _, _ in DEFAULT_COUNTERS}
    assert (
        read - defaults == {field for field, _, _ in EXTRA_COUNTERS} == {"DCGM_FI_DEV_FABRIC_MANAGER_STATUS"}
    )
