"""Inventory checks for multi-node groups with launcher data_parallel (their `data_parallel` block and the
models served on them), and the DataParallelSettings they build."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllmctl.inventory.model import DP_RPC_PORT, DataParallelSettings

if TYPE_CHECKING:
    from vllmctl.inventory.resolve import Checker

# the group's data_parallel block sizes the ranks; the model's own copies would contradict it
GROUP_OWNED_ARGS = ("data_parallel_size", "data_parallel_size_local", "pipeline_parallel_size")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def data_parallel_settings(raw: dict[str, Any]) -> DataParallelSettings:
    return DataParallelSettings(**_mapping(raw.get("data_parallel")))


def check_group(checker: Checker, group: str, raw: dict[str, Any], hosts: int) -> None:
    """The block belongs to launcher data_parallel; its sizes must split into whole nodes of the group."""
    launcher = raw.get("launcher", "ray")
    if "data_parallel" in raw and launcher != "data_parallel":
        checker.add(
            ("groups", group, "data_parallel"),
            f"group '{group}' has data_parallel settings but launcher {launcher}",
            "set launcher: data_parallel, or drop the data_parallel block",
            True,
        )
        return
    settings = _mapping(raw.get("data_parallel"))
    size, local = settings.get("size"), settings.get("size_local")
    if not (isinstance(size, int) and isinstance(local, int)) or isinstance(size, bool):
        return  # unset (sized at plan time from the GPUs) or the schema reported it
    path = ("groups", group, "data_parallel", "size")
    if size % local:
        checker.add(
            path,
            f"data_parallel size {size} is not a multiple of size_local {local}",
            "every node runs size_local ranks: make size a multiple of size_local",
        )
    elif size // local > hosts:
        checker.add(
            path,
            f"data_parallel size {size} needs {size // local} nodes of {local} ranks; "
            f"group '{group}' has {hosts}",
            "add hosts to the group, or lower size",
        )


def check_model(checker: Checker, model: str, body: dict[str, Any], group: str, raw: dict[str, Any]) -> None:
    """A model on a data_parallel group: its server port is not the RPC port, and its engine_args leave the
    ranks' sizes to the group."""
    port = body.get("port", 8000)
    rpc_port = _mapping(raw.get("data_parallel")).get("rpc_port", DP_RPC_PORT)
    if port == rpc_port:
        checker.add(
            ("models", model, "port"),
            f"port {port} is also the data-parallel rpc_port of group '{group}'",
            "pick a server port other than the group's data_parallel.rpc_port",
        )
    for key in GROUP_OWNED_ARGS:
        if key in _mapping(body.get("engine_args")):
            checker.add(
                ("models", model, "engine_args", key),
                f"model '{model}' sets {key} but its group '{group}' has launcher data_parallel",
                f"size the ranks in groups.{group}.data_parallel (size, size_local); "
                "each rank is tensor_parallel_size GPUs on one node",
                True,
            )
