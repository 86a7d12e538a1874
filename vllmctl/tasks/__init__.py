"""Desired state: playbooks (ordered data) name tasks, and each task expands for one host into operation calls
(pure). TASKS is built here, explicitly, from the model, provisioning and gateway tasks."""

from __future__ import annotations

from vllmctl.tasks.desired import MODEL_TASKS, HostContext, OpCall, Params, Task
from vllmctl.tasks.gateway import GATEWAY_TASKS
from vllmctl.tasks.provision import PROVISION_TASKS

TASKS: dict[str, Task] = {**MODEL_TASKS, **PROVISION_TASKS, **GATEWAY_TASKS}


def expand(task: str, params: Params, ctx: HostContext) -> list[OpCall]:
    """The operation calls one task of a playbook makes for one host."""
    return TASKS[task](ctx, params)


__all__ = ["TASKS", "Task", "expand"]
