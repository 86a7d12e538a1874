"""The provisioning operations (driver stack, engine venvs, model staging, GPU health gate, DCGM, service
health)."""

from __future__ import annotations

from vllmctl.ops.base import Operation
from vllmctl.ops.dcgm import DCGM_DIAG, DCGM_EXPORTER
from vllmctl.ops.driver import DRIVER_REBOOT, NVIDIA_DRIVER
from vllmctl.ops.engine import ENGINE_PRUNE, ENGINE_VENV, SYSTEM_PACKAGES
from vllmctl.ops.fabric import FABRIC_MANAGER
from vllmctl.ops.gpu_health import GPU_HEALTH
from vllmctl.ops.gpu_memory import GPU_MEMORY
from vllmctl.ops.kernel_modules import KERNEL_MODULES
from vllmctl.ops.model_stage import MODEL_DOWNLOAD, MODEL_SYNC
from vllmctl.ops.nouveau import NOUVEAU_BLACKLIST
from vllmctl.ops.nvlsm import NVLSM_OP
from vllmctl.ops.persistence import PERSISTENCE
from vllmctl.ops.service_start import SERVICE_HEALTH
from vllmctl.ops.unattended import UNATTENDED_UPGRADES

PROVISION_OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        KERNEL_MODULES,
        NVIDIA_DRIVER,
        NOUVEAU_BLACKLIST,
        UNATTENDED_UPGRADES,
        DRIVER_REBOOT,
        NVLSM_OP,
        FABRIC_MANAGER,
        PERSISTENCE,
        SYSTEM_PACKAGES,
        ENGINE_VENV,
        ENGINE_PRUNE,
        MODEL_DOWNLOAD,
        MODEL_SYNC,
        SERVICE_HEALTH,
        GPU_HEALTH,
        GPU_MEMORY,
        DCGM_DIAG,
        DCGM_EXPORTER,
    )
}
