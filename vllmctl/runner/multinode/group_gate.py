"""The gate of a group release at the edge: the engine (re)started on every node, the head last, then health
and (a new release) the smoke benchmark on every API server it runs (the head's, or every node's in vLLM's
hybrid and external data-parallel modes); and Ray's barrier for launcher ray."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from vllmctl.bench.readiness import FLOOR_S, HealthCheck, HealthResult
from vllmctl.bench.smoke import SmokeBench
from vllmctl.errors import VllmctlError
from vllmctl.multinode import bringup
from vllmctl.multinode.group_ops import (
    engine_journal_command,
    journal_errors,
    restart_step,
    started_as,
)
from vllmctl.multinode.units import ray_unit_name
from vllmctl.ops.release import journal_tail_command
from vllmctl.releases.gate import EndpointCheck, Verdict, decide
from vllmctl.releases.group import GroupManifest, api_servers
from vllmctl.releases.unit_exit import SHOW_PROPERTIES, restart_count
from vllmctl.render.quoting import shell_word
from vllmctl.runner.core.engine_watch import smoke_bench, wait_for_health, watch_units
from vllmctl.runner.multinode.group_gateway import GatewayAccess
from vllmctl.runner.multinode.group_nodes import Connect, Nodes, ssh_node

Log = Callable[[str], None]


@dataclass(frozen=True)
class GroupGateOptions:
    owner: str = "vllmctl"  # also the host lock's owner on every node
    break_lock: bool = False
    created_at: str = ""  # ISO 8601 UTC from the edge: the source of the release id
    inventory_digest: str = ""
    command_timeout_s: float = 120.0
    formed_timeout_s: float = 180.0
    health_timeout_s: float = FLOOR_S
    health: HealthCheck = wait_for_health
    bench: SmokeBench = smoke_bench
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)  # model -> its engine's API key
    connect: Connect = ssh_node  # one node's connection (tests pass a local one)
    gateway: GatewayAccess = field(default_factory=GatewayAccess)  # the gateway hosts and records' keeper
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def check_engine(
    nodes: Nodes,
    manifest: GroupManifest,
    engine_unit: str,
    opts: GroupGateOptions,
    log: Log,
    bench: bool,
    ranks: Sequence[str] = (),
) -> Verdict:
    """The engine (re)started, the other nodes first (launcher vllm: they wait for rank 0 at its master
    port; data_parallel: for the head's DP RPC port), then gated on every API server the release runs."""
    head = manifest.head
    servers = api_servers(manifest)
    api = list(dict.fromkeys(node for node, _port in servers)) or [head]
    show = f"systemctl show -p {SHOW_PROPERTIES} -- {shell_word(engine_unit)}"
    watches, since = {}, {}
    for node in api:  # each API server's wait stops when its own node's engine exits
        before = restart_count(nodes.shell(node, show, sudo=False))
        watches[node] = watch_units(nodes.remotes[node], [engine_unit], nodes.timeout_s, before)
        since[node] = nodes.shell(node, "date +%s", sudo=False).strip()
    for node in ranks:  # every rank restarts with rank 0: a rank left running holds the old group's state
        nodes.step(node, restart_step([engine_unit]))
        log(f"{node}: {engine_unit} started ({started_as(manifest, node, nodes.names.index(node))})")
    nodes.step(head, restart_step([engine_unit]))
    log(f"{head}: {engine_unit} started ({started_as(manifest, head, 0)})")
    checks, errors = [], []
    model, every = manifest.model, len(api) > 1
    for node, port in servers:
        key = opts.api_keys.get(model)
        url = nodes.url_of(node)(port)
        health: HealthResult = opts.health(url, model, opts.health_timeout_s, watches[node], api_key=key)
        tail = "" if health.ok else nodes.shell(node, journal_tail_command([engine_unit]).render())
        if not health.ok:
            found = journal_errors(nodes.shell(node, engine_journal_command(engine_unit, since[node])))
            errors += [f"{node}: {line}" if every else line for line in found]
        report = opts.bench(url, model, api_key=key) if bench and health.ok else None
        slo = manifest.models.get(model, {}).get("slo", {})
        checks.append(EndpointCheck(f"{model} on {node}" if every else model, health, report, slo, tail))
    verdict = decide(checks, require_bench=bench)
    if errors:
        causes = "\n".join(f"    {line}" for line in errors)
        reasons = (*verdict.reasons, f"errors the engine logged since its start:\n{causes}")
        verdict = Verdict(False, reasons, verdict.figures)
    return verdict


def wait_formed(
    nodes: Nodes, manifest: GroupManifest, opts: GroupGateOptions, log: Log
) -> bringup.RayStatus | None:
    """`ray status` on the head until every node and GPU of the release is there; None without Ray (launcher
    vllm: the ranks meet when the engine starts, and the gate judges them)."""
    if manifest.launcher != "ray":
        return None
    argv = [f"{manifest.venv_path}/bin/ray", "status", f"--address={manifest.ray_address}"]
    deadline = opts.clock() + opts.formed_timeout_s
    missing = "no answer yet"
    while opts.clock() < deadline:
        result = nodes.run(manifest.head, argv, 60)
        if result.ok:
            status = bringup.parse_ray_status(result.stdout)
            found = bringup.cluster_formed(status, manifest.pp, manifest.gpus_per_node)
            if found is None:
                log(f"ray status: {status.nodes} nodes, {status.gpus:g} GPUs")
                return status
            missing = found
        else:
            missing = (result.stderr or result.stdout).strip()[-300:]
        opts.sleep(2)
    raise VllmctlError(
        f"the Ray cluster of group '{manifest.group}' did not form within "
        f"{opts.formed_timeout_s:g}s: {missing}",
        f"see `journalctl -u {ray_unit_name(manifest.group)}` on the workers",
    )
