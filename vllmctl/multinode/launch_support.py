"""Which vLLM releases a multi-node launcher may run on: the flags each release's `vllm serve` accepts, as
read from its source (launch_flags.py, generated); a release that was not read is refused, not guessed.
"""

from __future__ import annotations

from vllmctl.errors import PlanError
from vllmctl.multinode.launch_flags import LAUNCH_FLAGS_BY_RELEASE, RELEASES_READ
from vllmctl.planner.versions import Version, format_version, parse_version

NNODES_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
DP_FLAGS = (
    "--data-parallel-size",
    "--data-parallel-size-local",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-start-rank",
)
# flags by mode on top of DP_FLAGS: the headless nodes (internal), an API server per node
MODE_FLAGS = {
    "internal": ("--headless",),
    "hybrid": ("--data-parallel-hybrid-lb",),
    "external": ("--data-parallel-rank",),
}
# vllm/engine/arg_utils.py from 0.21.0 (create_engine_config): "Non-MoE models do not support external data
# parallel mode" when --data-parallel-rank is set (one rank per node, each its own API server)
EXTERNAL_DP_MOE_ONLY_SINCE: Version = (0, 21, 0)


def _row(version: Version) -> tuple[Version, frozenset[str], int, str] | None:
    if version not in RELEASES_READ:
        return None
    return [row for row in LAUNCH_FLAGS_BY_RELEASE if row[0] <= version][-1]


def accepted_flags(version: Version) -> frozenset[str] | None:
    """The launch flags `vllm serve` of `version` accepts, or None when that release's source was not read."""
    row = _row(version)
    return row[1] if row else None


def all2all_default(version: Version) -> str | None:
    """vLLM's default MoE all-to-all backend (ParallelConfig.all2all_backend or VLLM_ALL2ALL_BACKEND)."""
    row = _row(version)
    return row[3] if row else None


def read_range() -> str:
    return f"{format_version(RELEASES_READ[0])} to {format_version(RELEASES_READ[-1])}"


def check_release(group: str, launcher: str, engine_version: str, needed: tuple[str, ...]) -> None:
    """PlanError unless the engine's release was read and accepts every flag in `needed`."""
    version = parse_version(engine_version)
    flags = accepted_flags(version)
    if flags is None:
        raise PlanError(
            f"launcher {launcher} in group '{group}': vLLM {engine_version}'s launch flags were not read "
            f"(read: {read_range()}, tools/gen_vllm_launch_flags.py), so its command line is not known",
            f"use a vLLM release from {read_range()}, or read this one's source into "
            "vllmctl/multinode/launch_flags.py (tools/gen_vllm_launch_flags.py)",
        )
    missing = [flag for flag in needed if flag not in flags]
    if missing:
        raise PlanError(
            f"launcher {launcher} in group '{group}' needs {', '.join(missing)}, which vLLM "
            f"{engine_version}'s `vllm serve` does not accept (read from its source)",
            "use launcher: ray for this engine version, or a newer vLLM"
            if launcher == "vllm"
            else "use a newer vLLM, or another launcher",
        )
