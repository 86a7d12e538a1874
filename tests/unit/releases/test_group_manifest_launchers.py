"""Group release manifests per launcher: a data-parallel group records its layout and launcher on every node
and reads back whole; launchers ray and vllm record exactly the plan they did before (TP and PP only)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from vllmctl.releases.group import GroupManifest, GroupSpec, group_manifests
from vllmctl.releases.host import manifest_from_json

ENGINE = "vllmctl-dsv3-0.service"
LAYOUT = {"data_parallel_size": 4, "data_parallel_size_local": 2, "start_ranks": {"a": 0, "b": 2}}


def spec(launcher: str) -> GroupSpec:
    units = {"a": {ENGINE: "[Service]\n# api server\n"}, "b": {ENGINE: "[Service]\n# headless\n"}}
    made = GroupSpec(
        "wide", "dsv3", "a", ("a", "b"), 2, 1, 4, "", "vllm", "0.32.0", "/opt/vllmctl/venvs/vllm-0.32.0",
        units, {"dsv3": {"source": "x", "ports": [8000]}}, launcher,
    )  # fmt: skip
    return replace(made, data_parallel=LAYOUT) if launcher == "data_parallel" else made


def test_every_node_records_the_data_parallel_layout_and_reads_it_back() -> None:
    made = group_manifests(spec("data_parallel"), "2026-12-03T09:00:00+00:00", "ops@ctl", "d" * 64)
    assert made["a"].id == made["b"].id
    for node, manifest in made.items():
        back = manifest_from_json(manifest.to_json(), node, GroupManifest)
        assert back == manifest and isinstance(back, GroupManifest)
        assert (back.launcher, back.plan["data_parallel"]) == ("data_parallel", LAYOUT)
        assert back.plan["tensor_parallel_size"] == 2


@pytest.mark.parametrize("launcher", ["ray", "vllm"])
def test_launchers_ray_and_vllm_record_only_tp_and_pp(launcher: str) -> None:
    made = group_manifests(spec(launcher), "2026-12-03T09:00:00+00:00", "ops@ctl", "d" * 64)
    for manifest in made.values():
        assert manifest.plan == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1}
        assert "data_parallel" not in json.loads(manifest.to_json())["plan"]
    dp = group_manifests(spec("data_parallel"), "2026-12-03T09:00:00+00:00", "ops@ctl", "d" * 64)
    assert dp["a"].id == made["a"].id  # the id comes from the units and the venv alone
