"""The apply flow's hooks into each host's run: whether a playbook makes releases, the release gate after a
host converged, keeping a held-back host on what it serves, and the gate's options they share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vllmctl.bench.readiness import FLOOR_S
from vllmctl.inventory.model import Inventory
from vllmctl.releases.host import inventory_digest
from vllmctl.runner.core.audit import lock_owner
from vllmctl.runner.core.execute import AfterHeld, AfterHost
from vllmctl.runner.core.remote import Remote
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Playbook

if TYPE_CHECKING:
    from vllmctl.runner.releases.release import GateOptions


class ApplyRequest(Protocol):
    """What the hooks read of apply's request (runner/apply.py)."""

    @property
    def inventory(self) -> str: ...
    @property
    def keep_releases(self) -> int | None: ...
    @property
    def health_timeout(self) -> float | None: ...
    @property
    def bookkeeping_timeout(self) -> float: ...


def gates(playbook: Playbook) -> bool:
    """Only a playbook that starts the model services makes releases."""
    return any(
        task.task == "model_services" and task.params.get("start", True) is not False
        for phase in playbook.phases
        for task in phase.tasks
    )


def gate_options(
    args: ApplyRequest, inventory: Inventory, started: str, keys: Mapping[str, str]
) -> GateOptions:
    from vllmctl.runner.releases.release import GateOptions

    return GateOptions(
        owner=lock_owner(started),
        created_at=started,
        inventory_digest=inventory_digest(Path(args.inventory).read_text()),
        keep=args.keep_releases or inventory.releases.keep,
        command_timeout_s=args.bookkeeping_timeout,
        health_timeout_s=args.health_timeout or FLOOR_S,
        api_keys=keys,
    )


def release_hook(
    args: ApplyRequest, inventory: Inventory, started: str, keys: Mapping[str, str]
) -> AfterHost:
    from vllmctl.runner.releases.release import gate_host

    opts = gate_options(args, inventory, started, keys)

    def after_host(
        ctx: HostContext, remote: Remote, lock: Callable[[], None], failure: str
    ) -> dict[str, Any]:
        return gate_host(ctx, remote, lock, opts, failure).to_json()

    return after_host


def keep_current_hook(args: ApplyRequest) -> AfterHeld:
    from vllmctl.runner.releases.release import keep_current

    return lambda ctx, remote: keep_current(ctx, remote, args.bookkeeping_timeout)
