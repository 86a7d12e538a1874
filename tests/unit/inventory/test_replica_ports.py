"""Issue #17, ports: replica i listens on port + i; every port a model may use on a host stays in 1024..65535
and clashes with no other model, the SSH port or a Ray port there. The replica count is the most the
inventory allows (gpus.count ÷ models on the host ÷ tensor_parallel_size), or the plan's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.ports import planned_port_problems

H100 = "{model: H100-80GB, count: 8}"
ONE = f"vllmctl: 1\nhosts:\n  a: {{address: 10.0.0.1, gpus: {H100}}}\nmodels:\n"
GROUP = (
    f"vllmctl: 1\nhosts:\n  a: {{address: 10.0.0.1, gpus: {H100}}}\n"
    f"  b: {{address: 10.0.0.2, gpus: {H100}}}\n"
    "groups:\n  g: {hosts: [a, b], multi_node: true, cluster_interface: eth1}\n"
    "models:\n  big: {source: org/big, hosts: g, port: 8000}\n"
)

CASES = [
    ("past-65535", ONE + "  m: {source: org/m, hosts: a, port: 65530}\n", "5:38 models.m.port",
     "would use ports 65530-65537, past 65535"),
    ("below-1024", ONE + "  m: {source: org/m, hosts: a, port: 80}\n", "5:38 models.m.port",
     "must be >= 1024"),
    ("overlapping-models", ONE + "  m: {source: org/m, hosts: a, port: 8000}\n  n: {source: org/n, hosts: a, "
     "port: 8002}\n", "6:38 models.n.port", "model 'n' on host 'a' would use ports 8002-8005, which overlaps "
     "model 'm' (8000-8003)"),
    ("on-the-ssh-port", ONE.replace("10.0.0.1,", "10.0.0.1, ssh: {port: 2222},") + "  m: {source: org/m, "
     "hosts: a, port: 2222, engine_args: {tensor_parallel_size: 8}}\n", "5:38 models.m.port",
     "would use port 2222, which overlaps the host's SSH port (2222)"),
    ("replicas-reach-the-ssh-port", ONE.replace("10.0.0.1,", "10.0.0.1, ssh: {port: 8003},")
     + "  m: {source: org/m, hosts: a, port: 8000, engine_args: {tensor_parallel_size: 2}}\n",
     "5:38 models.m.port", "would use ports 8000-8003, which overlaps the host's SSH port (8003)"),
    ("ray-gcs-port",
     GROUP + "  s: {source: org/s, hosts: b, port: 6379, engine_args: {tensor_parallel_size: 8}}\n",
     "9:38 models.s.port", "overlaps gcs_port of multi-node group 'g' (6379)"),
    ("ray-worker-range", GROUP + "  s: {source: org/s, hosts: a, port: 10050, engine_args: "
     "{tensor_parallel_size: 8}}\n", "9:38 models.s.port", "overlaps the Ray worker ports of group 'g'"),
    ("ray-client-port", GROUP + "  s: {source: org/s, hosts: a, port: 9998}\n", "9:38 models.s.port",
     "would use ports 9998-10001, which overlaps Ray's client server port (group 'g') (10001)"),
    ("ray-dashboard",
     GROUP.replace("eth1}", "eth1, ray: {dashboard: true}}") + "  s: {source: org/s, hosts: a, "
     "port: 8265, engine_args: {tensor_parallel_size: 8}}\n", "9:38 models.s.port", "Ray's dashboard port"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "where", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_replica_ports_that_clash_are_refused(workdir: Path, text: str, where: str, message: str) -> None:
    (workdir / "inv.yml").write_text(text)
    with pytest.raises(InvalidInputError) as caught:
        load_inventory("inv.yml")
    [problem] = caught.value.problems
    assert f"{problem.location.line}:{problem.location.column} {problem.location.path}" == where
    assert message in problem.message
    assert problem.hint


@pytest.mark.parametrize(
    "models",
    [
        # two models share the 8 GPUs: 4 each, one TP-4 replica each
        "  m: {source: org/m, hosts: a, engine_args: {tensor_parallel_size: 4}}\n"
        "  n: {source: org/n, hosts: a, port: 8001, engine_args: {tensor_parallel_size: 4}}\n",
        # SGLang serves its data-parallel workers on one port
        "  m: {source: org/m, hosts: a, engine: {name: sglang}}\n"
        "  n: {source: org/n, hosts: a, port: 8001}\n",
        # pipeline parallelism is one replica
        "  m: {source: org/m, hosts: a, engine_args: {pipeline_parallel_size: 2}}\n"
        "  n: {source: org/n, hosts: a, port: 8001}\n",
    ],
)
def test_ports_with_room_for_every_replica_validate(workdir: Path, models: str) -> None:
    (workdir / "inv.yml").write_text(ONE + models)
    assert set(load_inventory("inv.yml").models) == {"m", "n"}


def test_a_host_without_declared_gpus_counts_one_replica(workdir: Path) -> None:
    text = "vllmctl: 1\nhosts: {a: {}}\nmodels:\n  m: {source: org/m, hosts: a, port: 65535}\n"
    (workdir / "inv.yml").write_text(text + "  n: {source: org/n, hosts: a, port: 65534}\n")
    assert load_inventory("inv.yml").models["m"].port == 65535


def test_planned_replica_counts_get_the_same_checks(workdir: Path) -> None:
    text = "vllmctl: 1\nhosts: {a: {ssh: {port: 8010}}}\nmodels:\n  m: {source: org/m, hosts: a}\n"
    (workdir / "inv.yml").write_text(text + "  n: {source: org/n, hosts: a, port: 8004}\n")
    inventory = load_inventory("inv.yml")  # no GPUs declared: one replica each at validate time
    assert planned_port_problems(inventory, {("a", "m"): 4, ("a", "n"): 4}) == []
    assert planned_port_problems(inventory, {("a", "m"): 5, ("a", "n"): 7}) == [
        "model 'n' on host 'a' would use ports 8004-8010, which overlaps model 'm' (8000-8004)\n"
        "  hint: give each its own ports: replica i listens on port + i "
        "(replicas on a host: its gpus.count ÷ "
        "the models it serves ÷ tensor_parallel_size)"
    ]
