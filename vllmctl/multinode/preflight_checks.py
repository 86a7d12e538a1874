"""Preflight checks over gathered node facts and probe results: interface, versions, model, clocks, ports.

Every problem names the host and what to do; the head is the reference the others are compared with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vllmctl.inventory.model import ClusterSpec, EngineSpec, ModelDeployment
from vllmctl.multinode.preflight import CLOCK_BOUND_S, NodeFacts, ProbeResult, Problem
from vllmctl.tasks.desired import venv_path

TIME_SYNC_HINT = "enable time sync on every node (chrony or systemd-timesyncd) and check `timedatectl`"


def interface_problems(cluster: ClusterSpec, facts: Mapping[str, NodeFacts]) -> list[Problem]:
    if not cluster.interface:
        return []
    return [
        Problem(
            host,
            f"interface '{cluster.interface}' (cluster_interface of group '{cluster.group}') does not exist "
            "here or has no IPv4 address",
            f"name the NIC every node shares in groups.{cluster.group}.cluster_interface "
            "(`ip -br addr` on the host lists them)",
        )
        for host, found in facts.items()
        if found.interface_ip is None
    ]


def _same_everywhere(
    cluster: ClusterSpec,
    facts: Mapping[str, NodeFacts],
    values: Mapping[str, str | None],
    what: str,
    fix: str,
) -> list[Problem]:
    problems: list[Problem] = []
    head = cluster.hosts[0]
    reference = values.get(head)
    for host in cluster.hosts:
        if host not in facts:
            continue
        value = values.get(host)
        if value is None:
            problems.append(Problem(host, f"{what} is missing", fix))
        elif reference is not None and host != head and value != reference:
            problems.append(Problem(host, f"{what} is {value} here but {reference} on the head {head}", fix))
    return problems


def version_problems(
    cluster: ClusterSpec, engine: EngineSpec, facts: Mapping[str, NodeFacts]
) -> list[Problem]:
    venv = venv_path(engine)
    engines = {host: f.engine_version for host, f in facts.items()}
    rays = {host: f.ray_version for host, f in facts.items()}
    engine_fix = (
        f"install {engine.distribution}=={engine.version} in {venv} on every node (`vllmctl apply` "
        "installs it; one engine version for the whole group)"
    )
    ray_fix = (
        f"install ray=={cluster.ray.version} in {venv} on every node (groups.{cluster.group}.ray.version)"
    )
    problems = _same_everywhere(cluster, facts, engines, f"{engine.distribution} in {venv}", engine_fix)
    if cluster.launcher == "ray":
        problems += _same_everywhere(cluster, facts, rays, f"ray in {venv}", ray_fix)
    return problems


def model_problems(
    cluster: ClusterSpec, model: ModelDeployment, facts: Mapping[str, NodeFacts]
) -> list[Problem]:
    revisions = {host: f.model_revision for host, f in facts.items()}
    fix = (
        f"stage the same files on every node: pin models.{model.name}.revision and apply"
        if not model.source.startswith("/")
        else f"copy the same {model.source} to every node (vllmctl apply stages local models)"
    )
    return _same_everywhere(
        cluster, facts, revisions, f"model {model.source} (revision or file fingerprint)", fix
    )


def clock_offset(found: NodeFacts) -> tuple[float, float]:
    """(host clock minus controller clock, uncertainty): the host read its clock somewhere between the
    controller's send and receive times, so the midpoint is the estimate and half the round trip the error."""
    midpoint = (found.sent_at + found.received_at) / 2
    return found.host_time - midpoint, (found.received_at - found.sent_at) / 2


def clock_problems(
    cluster: ClusterSpec, facts: Mapping[str, NodeFacts], bound_s: float = CLOCK_BOUND_S
) -> list[Problem]:
    head = cluster.hosts[0]
    if head not in facts:
        return []
    head_offset, head_error = clock_offset(facts[head])
    problems = []
    for host in cluster.hosts[1:]:
        if host not in facts:
            continue
        offset, error = clock_offset(facts[host])
        apart = abs(offset - head_offset)
        if apart - error - head_error > bound_s:
            problems.append(
                Problem(
                    host,
                    f"clock is {apart:.2f} s off the head {head}'s (bound {bound_s:g} s; "
                    f"{error + head_error:.2f} s of that may be SSH latency)",
                    TIME_SYNC_HINT,
                )
            )
    return problems


def reachability_problems(results: Sequence[ProbeResult], addresses: Mapping[str, str]) -> list[Problem]:
    return [
        Problem(
            r.source,
            f"cannot reach {r.target} ({addresses.get(r.target, '?')}) on TCP port {r.port}: {r.outcome}",
            f"open TCP {r.port} from {r.source} to {r.target} in every firewall between them: "
            "Ray and NCCL need every node to reach every other on the group's ports",
        )
        for r in results
        if r.outcome != "ok"
    ]


def fact_problems(
    cluster: ClusterSpec, model: ModelDeployment, engine: EngineSpec, facts: Mapping[str, NodeFacts]
) -> list[Problem]:
    """Everything decidable from one round trip per host (reachability needs the listeners and probes)."""
    return [
        *interface_problems(cluster, facts),
        *version_problems(cluster, engine, facts),
        *model_problems(cluster, model, facts),
        *clock_problems(cluster, facts),
    ]
