"""The KV prediction each release records, at the edge: model configs loaded once per apply (local files or
the shipped catalog, never the hub) and the inventory planned once, shared by the hosts gating in parallel."""

from __future__ import annotations

import threading
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.planner.inventory_plan import InventoryPlan, plan_inventory
from vllmctl.releases.kv import cpu_predictions, gpu_predictions
from vllmctl.runner.fleet.hosts import load_model_archs
from vllmctl.tasks.desired import HostContext


class KvPredictor:
    """ctx -> model -> predicted KV figures. Plans the inventory once per apply (hosts gate in parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._planned: tuple[Inventory, dict[str, Any], InventoryPlan] | None = None

    def _plan(self, inv: Inventory) -> tuple[dict[str, Any], InventoryPlan]:
        with self._lock:
            if self._planned is None or self._planned[0] is not inv:
                archs, _ = load_model_archs(inv, online=False)
                self._planned = (inv, archs, plan_inventory(inv, None, archs))
            return self._planned[1], self._planned[2]

    def __call__(self, ctx: HostContext) -> dict[str, dict[str, Any]]:
        try:
            archs, plan = self._plan(ctx.inventory)
        except VllmctlError:
            return {}
        return gpu_predictions(ctx, plan) | cpu_predictions(ctx, archs)
