"""Multi-node edge: runs the cluster preflight over SSH (facts, listeners, probes), prepares the nodes and
reads a group's state for `cluster --status` and `status`. Bringing the group up as one release:
cluster_release.py. Decisions live in multinode/.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from vllmctl.catalog.loader import load_arch
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import ClusterSpec, EngineSpec, Inventory, ModelDeployment
from vllmctl.multinode import bringup
from vllmctl.multinode.plan import ClusterPlan, plan_cluster
from vllmctl.multinode.preflight import (
    NodeFacts,
    PreflightReport,
    ProbeResult,
    Problem,
    cluster_ports,
    listener_argv,
    node_addresses,
    node_facts_script,
    parse_listener,
    parse_node_facts,
    parse_probe,
    probe_argv,
    probe_targets,
    stop_listener_argv,
)
from vllmctl.multinode.preflight_checks import fact_problems, reachability_problems
from vllmctl.multinode.units import VLLM_CLI
from vllmctl.paths import VLLM_CLI_HELPER
from vllmctl.runner.fleet.hosts import fan_out
from vllmctl.status.group import cluster_state, node_state_script
from vllmctl.status.model import ClusterState
from vllmctl.transport import SshTransport

FORKS = 32  # a cluster's nodes are asked all at once; groups are small
Log = Callable[[str], None]


def run_preflight(
    inv: Inventory,
    model: ModelDeployment,
    cluster: ClusterSpec,
    engine: EngineSpec,
    timeout_s: float = 60.0,
    clock: Callable[[], float] = time.time,
) -> PreflightReport:
    """Facts in one round trip per host, then listeners on every host, then every host probes every other."""
    report = PreflightReport()
    transports = {host: SshTransport(inv.hosts[host]) for host in cluster.hosts}
    try:
        script = node_facts_script(cluster, model, engine)

        def facts(host: str) -> str:
            transports[host].connect()  # connect first, so the clock round trip is one command, not a login
            sent = clock()
            result = transports[host].run(script, sudo=True, timeout=timeout_s)
            received = clock()
            report.facts[host] = parse_node_facts(result.stdout, sent, received)
            return host

        for host, answered in fan_out(cluster.hosts, facts, FORKS).items():
            if isinstance(answered, VllmctlError):
                report.problems.append(Problem(host, answered.message, answered.hint))
        report.problems += fact_problems(cluster, model, engine, report.facts)
        addresses = node_addresses(inv, report.facts)
        ports = cluster_ports(cluster)
        listeners = fan_out(
            tuple(report.facts),
            lambda host: transports[host].run(listener_argv(ports), timeout=timeout_s),
            FORKS,
        )
        probes: list[ProbeResult] = []

        def probe(host: str) -> list[ProbeResult]:
            result = transports[host].run(
                probe_argv(probe_targets(cluster, host, addresses)), timeout=timeout_s
            )
            return parse_probe(host, result.stdout)

        for host, outcome in fan_out(tuple(report.facts), probe, FORKS).items():
            if isinstance(outcome, VllmctlError):
                report.problems.append(Problem(host, outcome.message, outcome.hint))
            else:
                probes += outcome
        report.problems += reachability_problems(probes, addresses)
        for host, started in listeners.items():
            pid = None if isinstance(started, VllmctlError) else parse_listener(started.stdout)[1]
            if pid is not None:  # free the ports now: Ray binds them next
                transports[host].run(stop_listener_argv(pid), timeout=timeout_s)
    finally:
        for transport in transports.values():
            transport.close()
    return report


def node_facts(
    inv: Inventory,
    model: ModelDeployment,
    cluster: ClusterSpec,
    engine: EngineSpec,
    hosts: Sequence[str],
    timeout_s: float = 60.0,
) -> dict[str, NodeFacts]:
    """The preflight's read-only round trip (interface address, engine and Ray versions) on `hosts`."""
    script = node_facts_script(cluster, model, engine)

    def ask(host: str) -> NodeFacts:
        transport = SshTransport(inv.hosts[host])
        try:
            return parse_node_facts(transport.run(script, sudo=True, timeout=timeout_s).stdout, 0.0, 0.0)
        finally:
            transport.close()

    found = fan_out(hosts, ask, FORKS)
    for answer in found.values():
        if isinstance(answer, VllmctlError):
            raise answer
    return {host: answer for host, answer in found.items() if not isinstance(answer, VllmctlError)}


def _must(
    transport: SshTransport, command: str | list[str], what: str, timeout_s: float, stdin: bytes = b""
) -> str:
    result = transport.run(command, sudo=True, timeout=timeout_s, stdin=stdin or None)
    if not result.ok:
        raise replace(result, host=transport.host.name).error(what, limit=800)
    return result.stdout


def prepare_nodes(
    inv: Inventory,
    plan: ClusterPlan,
    engine: EngineSpec,
    index_url: str | None,
    log: Log,
    credentials: str | None = None,
) -> None:
    """Provisioning only (nothing starts): the service user, Ray's directory, and Ray in the engine venv
    (launcher ray) or the script that runs vLLM's CLI there (launchers vllm and data_parallel)."""
    cluster = plan.cluster
    own = cluster.ray_free

    def prepare(host: str) -> None:
        transport = SshTransport(inv.hosts[host])
        try:
            _must(transport, bringup.node_setup_script(), "service user and Ray directory", 60)
            if own:
                script, stdin = bringup.cli_helper_script(), VLLM_CLI.encode()
                _must(transport, script, f"writing {VLLM_CLI_HELPER}", 60, stdin)
                return
            script = bringup.ray_install_script(engine, cluster, index_url, credentials)
            stdin = bringup.ray_install_stdin(index_url, credentials)
            _must(transport, script, "installing ray", 900, stdin)
        finally:
            transport.close()

    for host, outcome in fan_out(plan.hosts, prepare, FORKS).items():
        if isinstance(outcome, VllmctlError):
            raise outcome
        log(
            f"{host}: {VLLM_CLI_HELPER} written"
            if own
            else f"{host}: ray {cluster.ray.version} in the engine venv"
        )


def cluster_status(
    inv: Inventory, plan: ClusterPlan, engine: EngineSpec, timeout_s: float = 60.0
) -> ClusterState:
    """The group as one, one round trip per used node: its Ray unit; on the head the engine unit and
    `ray status`. A node that cannot be asked is part of the answer, not an exception."""
    head_address = inv.hosts[plan.head].address

    def ask(host: str) -> str:
        transport = SshTransport(inv.hosts[host])
        try:
            script = node_state_script(plan, engine, host, head_address)
            return transport.run(script, timeout=timeout_s).stdout
        finally:
            transport.close()

    return cluster_state(plan, fan_out(plan.hosts, ask, FORKS), inv.models[plan.model].port)


def group_api_hosts(inv: Inventory, models: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Per multi-node model, the nodes of its group that run an API server, planned offline (a model that
    cannot be planned is left out: its head then stands for it, and `group_states` reports why)."""
    found = {}
    for name in models:
        model = inv.models[name]
        try:
            arch = load_arch(model.source, model.revision, online=False)
            if model.cluster is not None:
                found[name] = plan_cluster(inv, model, model.cluster, None, arch).api_hosts
        except VllmctlError:
            continue
    return found


def group_states(
    inv: Inventory, models: Sequence[str], timeout_s: float = 60.0
) -> dict[str, ClusterState | VllmctlError]:
    """Per multi-node model (on a multi_node group): its cluster planned offline, then its nodes asked."""

    def one(name: str) -> ClusterState:
        model = inv.models[name]
        if model.cluster is None:
            raise VllmctlError(f"model {name!r} is not on a multi_node group", "see docs/multinode.md")
        arch = load_arch(model.source, model.revision, online=False)
        plan = plan_cluster(inv, model, model.cluster, None, arch)
        return cluster_status(inv, plan, model.engine or inv.hosts[plan.head].engine, timeout_s)

    return fan_out(models, one, FORKS)
