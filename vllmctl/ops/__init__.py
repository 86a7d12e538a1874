"""Pure operations: `(args, facts) -> Step`; the registry the desired state and playbooks name them by."""

from __future__ import annotations

from vllmctl.ops.base import Action, Command, FileChange, Operation, OpError, Step, Upload, sha256_text
from vllmctl.ops.files import DIRECTORY, ENV_FILE, FILE, SYSTEMD_UNIT
from vllmctl.ops.gateway import GATEWAY_CONFIG
from vllmctl.ops.keepalived import KEEPALIVED_CONFIG_OP
from vllmctl.ops.provision import PROVISION_OPERATIONS
from vllmctl.ops.system import PYTHON_VENV, SERVICE, SERVICE_USER

OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        DIRECTORY,
        FILE,
        ENV_FILE,
        SYSTEMD_UNIT,
        SERVICE_USER,
        SERVICE,
        PYTHON_VENV,
        GATEWAY_CONFIG,
        KEEPALIVED_CONFIG_OP,
    )
} | PROVISION_OPERATIONS

__all__ = [
    "OPERATIONS",
    "Action",
    "Command",
    "FileChange",
    "OpError",
    "Operation",
    "Step",
    "Upload",
    "sha256_text",
]
