"""Multi-node edge: runs the cluster preflight over SSH (facts, listeners, probes) and brings a Ray cluster
up in order (head, workers, `ray status` barrier, then vLLM on the head). Decisions live in multinode/.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from vllmctl.desired import unit_name
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import ClusterSpec, EngineSpec, Inventory, ModelDeployment
from vllmctl.multinode import bringup
from vllmctl.multinode.plan import ClusterPlan
from vllmctl.multinode.preflight import (
    PreflightReport,
    ProbeResult,
    Problem,
    cluster_ports,
    listener_argv,
    node_facts_script,
    parse_listener,
    parse_node_facts,
    parse_probe,
    probe_argv,
    probe_targets,
    stop_listener_argv,
)
from vllmctl.multinode.preflight_checks import fact_problems, reachability_problems
from vllmctl.multinode.units import ray_unit_name, render_head_engine_unit, render_ray_unit
from vllmctl.transport import SshTransport

T = TypeVar("T")
Log = Callable[[str], None]


def _each(hosts: tuple[str, ...], work: Callable[[str], T]) -> dict[str, T | VllmctlError]:
    def guarded(host: str) -> T | VllmctlError:
        try:
            return work(host)
        except VllmctlError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return dict(zip(hosts, pool.map(guarded, hosts), strict=True))


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

        for host, answered in _each(cluster.hosts, facts).items():
            if isinstance(answered, VllmctlError):
                report.problems.append(Problem(host, answered.message, answered.hint))
        report.problems += fact_problems(cluster, model, engine, report.facts)
        addresses = {
            host: found.interface_ip or inv.hosts[host].address for host, found in report.facts.items()
        }
        ports = cluster_ports(cluster)
        listeners = _each(
            tuple(report.facts), lambda host: transports[host].run(listener_argv(ports), timeout=timeout_s)
        )
        probes: list[ProbeResult] = []

        def probe(host: str) -> list[ProbeResult]:
            result = transports[host].run(
                probe_argv(probe_targets(cluster, host, addresses)), timeout=timeout_s
            )
            return parse_probe(host, result.stdout)

        for host, outcome in _each(tuple(report.facts), probe).items():
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


def _must(transport: SshTransport, command: str | list[str], what: str, timeout_s: float) -> str:
    result = transport.run(command, sudo=True, timeout=timeout_s)
    if not result.ok:
        raise VllmctlError(
            f"{transport.host.name}: {what} failed (exit {result.exited})",
            f"stderr: {(result.stderr or result.stdout).strip()[-800:] or '(none)'}",
        )
    return result.stdout


def prepare_nodes(
    inv: Inventory, plan: ClusterPlan, engine: EngineSpec, index_url: str | None, log: Log
) -> None:
    """Provisioning only (nothing starts): the service user, Ray's directory, Ray in the engine venv."""
    cluster = plan.cluster

    def prepare(host: str) -> None:
        transport = SshTransport(inv.hosts[host])
        try:
            _must(transport, bringup.node_setup_script(), "service user and Ray directory", 60)
            _must(transport, bringup.ray_install_script(engine, cluster, index_url), "installing ray", 900)
        finally:
            transport.close()

    for host, outcome in _each(plan.hosts, prepare).items():
        if isinstance(outcome, VllmctlError):
            raise outcome
        log(f"{host}: ray {cluster.ray.version} in the engine venv")


def start_cluster(
    inv: Inventory,
    plan: ClusterPlan,
    engine: EngineSpec,
    addresses: Mapping[str, str],
    start_engine: bool,
    log: Log,
    wait_s: float = 180.0,
) -> bringup.RayStatus:
    """Ray units on every used node, head first; the `ray status` barrier; then vLLM on the head if asked."""
    cluster = plan.cluster
    gpus_per_node = int(plan.plan.gpu_count)
    transports = {host: SshTransport(inv.hosts[host]) for host in plan.hosts}
    unit = ray_unit_name(cluster.group)
    try:
        texts = {
            host: render_ray_unit(
                cluster, engine, host, addresses, gpus_per_node, inv.hosts[host].vars.get("env", {})
            )
            for host in plan.hosts
        }
        running = {host: _running_as(transports[host], unit, texts[host]) for host in plan.hosts}
        if all(running.values()):
            log(f"{unit} unchanged and active on {', '.join(plan.hosts)}: not restarted")
        else:
            for host in plan.hosts:  # the head first: workers join its GCS
                transports[host].put(texts[host].encode(), bringup.unit_path(unit), "0644", timeout=60)
                _must(transports[host], bringup.start_script(unit), f"starting {unit}", 120)
                log(f"{host}: {unit} started ({'head' if host == plan.head else 'worker'})")
        status = _wait_for_cluster(transports[plan.head], engine, plan, addresses, wait_s, log)
        if start_engine:
            model = inv.models[plan.model]
            engine_unit = unit_name(model.name, 0)
            env = inv.hosts[plan.head].vars.get("env", {})
            text = render_head_engine_unit(model, engine, plan, addresses, env)
            transports[plan.head].put(text.encode(), bringup.unit_path(engine_unit), "0644", timeout=60)
            _must(transports[plan.head], bringup.start_script(engine_unit), f"starting {engine_unit}", 120)
            log(f"{plan.head}: {engine_unit} started (PP {plan.pp} x TP {plan.tp})")
        return status
    finally:
        for transport in transports.values():
            transport.close()


def _running_as(transport: SshTransport, unit: str, text: str) -> bool:
    """The unit is active with exactly this content: restarting it would only drop the cluster for nothing."""
    current = transport.run(["cat", "--", bringup.unit_path(unit)], sudo=True, timeout=30)
    state = transport.run(["systemctl", "is-active", unit], timeout=30)
    return current.ok and current.stdout == text and state.stdout.strip() == "active"


def _wait_for_cluster(
    head: SshTransport,
    engine: EngineSpec,
    plan: ClusterPlan,
    addresses: Mapping[str, str],
    wait_s: float,
    log: Log,
) -> bringup.RayStatus:
    argv = bringup.ray_status_argv(engine, addresses[plan.head], plan.cluster.ray.gcs_port)
    deadline = time.monotonic() + wait_s
    missing = "no answer yet"
    status = bringup.RayStatus(0, 0.0)
    while time.monotonic() < deadline:
        result = head.run(argv, timeout=60)
        if result.ok:
            status = bringup.parse_ray_status(result.stdout)
            found = bringup.cluster_formed(status, plan.pp, int(plan.plan.gpu_count))
            if found is None:
                log(f"ray status: {status.nodes} nodes, {status.gpus:g} GPUs")
                return status
            missing = found
        else:
            missing = (result.stderr or result.stdout).strip()[-300:]
        time.sleep(2)
    raise VllmctlError(
        f"the Ray cluster of group '{plan.cluster.group}' did not form within {wait_s:g}s: {missing}",
        f"see `journalctl -u {ray_unit_name(plan.cluster.group)}` on the workers; vLLM was not started",
    )


def cluster_status(
    inv: Inventory, plan: ClusterPlan, engine: EngineSpec, timeout_s: float = 60.0
) -> dict[str, object]:
    """The group as one: each node's Ray unit, the head's engine unit, and what `ray status` counts."""
    cluster = plan.cluster
    transports = {host: SshTransport(inv.hosts[host]) for host in plan.hosts}
    unit = ray_unit_name(cluster.group)
    try:

        def state(host: str, name: str) -> str:
            return transports[host].run(["systemctl", "is-active", name], timeout=timeout_s).stdout.strip()

        nodes = {host: state(host, unit) for host in plan.hosts}
        engine_unit = unit_name(plan.model, 0)
        head = transports[plan.head]
        found = head.run(
            node_facts_script(cluster, inv.models[plan.model], engine), sudo=True, timeout=timeout_s
        )
        head_ip = parse_node_facts(found.stdout, 0.0, 0.0).interface_ip or inv.hosts[plan.head].address
        ray = head.run(bringup.ray_status_argv(engine, head_ip, cluster.ray.gcs_port), timeout=timeout_s)
        counted = bringup.parse_ray_status(ray.stdout) if ray.ok else bringup.RayStatus(0, 0.0)
        return {
            "group": cluster.group,
            "head": plan.head,
            "ray_units": nodes,
            "ray_nodes": counted.nodes,
            "ray_gpus": counted.gpus,
            "formed": bringup.cluster_formed(counted, plan.pp, int(plan.plan.gpu_count)) is None,
            "engine_unit": engine_unit,
            "engine": state(plan.head, engine_unit),
        }
    finally:
        for transport in transports.values():
            transport.close()
