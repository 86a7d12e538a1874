"""The data-parallel inventory text the multinode and gateway unit tests share: DeepSeek-V3 on the multi-node
group `wide` as launcher data_parallel, with each test's own data_parallel block, hosts and additions."""

from __future__ import annotations

DSV3 = """\
models:
  dsv3:
    source: deepseek-ai/DeepSeek-V3
    hosts: wide
    max_model_len: 8192
    engine: {name: vllm, version: "0.32.0"}
"""


def dp_inventory(
    data_parallel: str = "{size_local: 8, size: 16}",
    hosts: str = "[gpu-01, gpu-02, gpu-03]",
    model_extra: str = "",
    tail: str = "",
) -> str:
    """The group, then the model (`model_extra`: more of its lines), then `tail` (a gateway, say)."""
    group = (
        f"groups:\n  wide:\n    hosts: {hosts}\n    multi_node: true\n    cluster_interface: eth1\n"
        f"    launcher: data_parallel\n    data_parallel: {data_parallel}\n"
    )
    return group + DSV3 + model_extra + tail
