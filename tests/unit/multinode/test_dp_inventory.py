"""Launcher data_parallel in the inventory: what loads, and each mistake with file:line and field."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.inventory.model import DataParallelSettings, Inventory

Load = Callable[[str], Inventory]
Problems = Callable[[str], list[str]]
GROUP = """\
groups:
  wide:
    hosts: [gpu-01, gpu-02]
    multi_node: true
    cluster_interface: eth1
    launcher: data_parallel
"""
MODEL = "models:\n  dsv3: {source: deepseek-ai/DeepSeek-V3, hosts: wide}\n"


def test_the_settings_load_with_vllms_defaults(load: Load) -> None:
    inv = load(GROUP + MODEL)
    cluster = inv.clusters["wide"]
    assert (cluster.launcher, cluster.data_parallel, cluster.ray_free) == (
        "data_parallel",
        DataParallelSettings(),
        True,
    )
    assert DataParallelSettings().rpc_port == 29550 and DataParallelSettings().balancing == "internal"
    given = load(
        GROUP + "    data_parallel: {size_local: 4, size: 8, balancing: external, rpc_port: 13345}\n" + MODEL
    )
    assert given.clusters["wide"].data_parallel == DataParallelSettings(4, 8, "external", 13345)


def test_sizes_must_make_whole_nodes_of_the_group(problems: Problems) -> None:
    found = problems(GROUP + "    data_parallel: {size_local: 4, size: 6}\n" + MODEL)
    assert found == [
        "inv.yml:15:42: groups.wide.data_parallel.size: data_parallel size 6 is not a multiple of "
        "size_local 4\n"
        "  hint: every node runs size_local ranks: make size a multiple of size_local"
    ]
    found = problems(GROUP + "    data_parallel: {size_local: 4, size: 12}\n" + MODEL)
    assert found == [
        "inv.yml:15:42: groups.wide.data_parallel.size: data_parallel size 12 needs 3 nodes of 4 ranks; "
        "group 'wide' has 2\n  hint: add hosts to the group, or lower size"
    ]


def test_the_block_needs_its_launcher_and_known_keys(problems: Problems) -> None:
    found = problems(GROUP.replace("data_parallel\n", "vllm\n") + "    data_parallel: {size: 2}\n" + MODEL)
    assert found == [
        "inv.yml:15:5: groups.wide.data_parallel: group 'wide' has data_parallel settings but launcher vllm\n"
        "  hint: set launcher: data_parallel, or drop the data_parallel block"
    ]
    found = problems(GROUP + "    data_parallel: {balancing: round_robin, local: 2}\n" + MODEL)
    assert any(
        p.startswith("inv.yml:15:32: groups.wide.data_parallel.balancing: must be one of internal, external")
        for p in found
    ), found
    assert any(p.startswith("inv.yml:15:45: groups.wide.data_parallel.local: unknown key") for p in found)


def test_a_model_leaves_the_sizes_to_the_group_and_keeps_off_the_rpc_port(problems: Problems) -> None:
    model = (
        "models:\n  dsv3:\n    source: deepseek-ai/DeepSeek-V3\n    hosts: wide\n    port: 29550\n"
        "    engine_args: {data_parallel_size: 16, tensor_parallel_size: 1}\n"
    )
    found = problems(GROUP + model)
    assert (
        "inv.yml:19:11: models.dsv3.port: port 29550 is also the data-parallel rpc_port of group 'wide'\n"
        "  hint: pick a server port other than the group's data_parallel.rpc_port"
    ) in found
    assert (
        "inv.yml:20:19: models.dsv3.engine_args.data_parallel_size: model 'dsv3' sets data_parallel_size but "
        "its group 'wide' has launcher data_parallel\n"
        "  hint: size the ranks in groups.wide.data_parallel (size, size_local); each rank is "
        "tensor_parallel_size GPUs on one node"
    ) in found
