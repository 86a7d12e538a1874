"""Cross-host preflight of a multi-node engine, pure: the scripts each host runs (node facts, short-lived
listeners, connect probes), their parsers, and the checks that turn them into problems naming host and fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vllmctl.inventory.model import ClusterSpec, EngineSpec, Inventory, ModelDeployment
from vllmctl.paths import HUB_CACHE
from vllmctl.render.quoting import shell_word
from vllmctl.tasks.desired import venv_path

CLOCK_BOUND_S = 1.0
LISTEN_SECONDS = 60  # listeners outlive the probes by a wide margin, then exit on their own
PROBE_TIMEOUT_S = 3.0
MISSING = "-"


@dataclass(frozen=True)
class Problem:
    host: str
    message: str
    hint: str

    def render(self) -> str:
        return f"{self.host}: {self.message}\n  hint: {self.hint}"


@dataclass(frozen=True)
class NodeFacts:
    """One host's answer, and when the controller sent the request and read the reply (its own clock)."""

    host_time: float
    interface_ip: str | None
    engine_version: str | None
    ray_version: str | None
    model_revision: str | None
    sent_at: float = 0.0
    received_at: float = 0.0


def node_addresses(inv: Inventory, facts: Mapping[str, NodeFacts]) -> dict[str, str]:
    """Each node's address on the cluster interface, else its inventory address (no interface named)."""
    return {host: found.interface_ip or inv.hosts[host].address for host, found in facts.items()}


@dataclass(frozen=True)
class ProbeResult:
    source: str
    target: str
    port: int
    outcome: str  # "ok", "refused", "timeout" or another error name


@dataclass
class PreflightReport:
    problems: list[Problem] = field(default_factory=list)
    facts: dict[str, NodeFacts] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def cluster_ports(cluster: ClusterSpec) -> list[int]:
    """Ports every host must reach on every other: Ray's fixed ports, both ends of the worker range, and
    vLLM's torch.distributed rendezvous port (NCCL's own bootstrap ports are ephemeral; see docs). Launcher
    vllm: the head's master port (its engine's message queue and NCCL/Gloo ports are ephemeral too)."""
    if cluster.launcher == "vllm":
        return [cluster.master_port]
    if cluster.launcher == "data_parallel":
        # the head's DP RPC port (the handshake); the coordinator's and DP group's ports are ephemeral
        return [cluster.data_parallel.rpc_port]
    ray = cluster.ray
    ports = [ray.gcs_port, ray.node_manager_port, ray.object_manager_port, ray.distributed_port]
    return [*ports, ray.min_worker_port, ray.max_worker_port]


def model_fingerprint_command(model: ModelDeployment) -> str:
    """Local model directories: names and sizes of their files, hashed; hub models: the staged commit."""
    if model.source.startswith("/"):
        # names and sizes of every file plus the content of the small JSON ones: hashing weights is too slow
        where = shell_word(model.source)
        listing = f"{{ find {where} -type f -printf '%P %s\\n' | sort; cat {where}/*.json; }} 2>/dev/null"
        return f"if [ -d {where} ]; then {listing} | sha256sum | cut -c1-16; else echo {MISSING}; fi"
    repo = f"models--{model.source.replace('/', '--')}"
    ref = f"{HUB_CACHE}/{repo}/refs/{model.revision or 'main'}"
    return f"cat {shell_word(ref)} 2>/dev/null || echo {MISSING}"


def version_command(engine: EngineSpec, distribution: str) -> str:
    python = shell_word(f"{venv_path(engine)}/bin/python")
    code = shell_word(f"import importlib.metadata as m; print(m.version({distribution!r}))")
    return f"{python} -c {code} 2>/dev/null || echo {MISSING}"


def interface_ip_command(interface: str | None) -> str:
    """Prints the first IPv4 address of `interface`, or MISSING when it has none (or none is named)."""
    if not interface:
        return f"echo {MISSING}"
    return (
        f"ip -o -4 addr show dev {shell_word(interface)} 2>/dev/null | awk '{{print $4}}' | cut -d/ -f1 "
        f"| head -n1 | grep . || echo {MISSING}"
    )


def node_facts_script(cluster: ClusterSpec, model: ModelDeployment, engine: EngineSpec) -> str:
    """One round trip: the host's clock first (nearest the send time), then the rest, as key=value lines."""
    lines = [
        "echo time=$(date +%s.%N)",
        f"echo interface_ip=$({interface_ip_command(cluster.interface)})",
        f"echo engine_version=$({version_command(engine, engine.distribution)})",
        f"echo ray_version=$({version_command(engine, 'ray')})",
        f"echo model_revision=$({model_fingerprint_command(model)})",
    ]
    return "\n".join(lines) + "\n"


def parse_node_facts(stdout: str, sent_at: float, received_at: float) -> NodeFacts:
    values = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)

    def value(key: str) -> str | None:
        found = values.get(key, MISSING).strip()
        return None if found in ("", MISSING) else found

    return NodeFacts(
        host_time=float(values.get("time", "0") or 0),
        interface_ip=value("interface_ip"),
        engine_version=value("engine_version"),
        ray_version=value("ray_version"),
        model_revision=value("model_revision"),
        sent_at=sent_at,
        received_at=received_at,
    )


LISTENER = """
import os, select, socket, sys, time
ports, seconds = [int(p) for p in sys.argv[1].split(",")], float(sys.argv[2])
socks, busy = [], []
for port in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port)); s.listen(64); socks.append(s)
    except OSError:
        busy.append(str(port)); s.close()
child = os.fork()
if child:
    print("busy=" + ",".join(busy) + "\\npid=" + str(child), flush=True)
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
end = time.monotonic() + seconds
while socks and time.monotonic() < end:
    for s in select.select(socks, [], [], 1.0)[0]:
        s.accept()[0].close()
"""

PROBE = """
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
targets, timeout = json.loads(sys.argv[1]), float(sys.argv[2])
def probe(target):
    name, ip, port = target
    try:
        socket.create_connection((ip, port), timeout=timeout).close(); return [name, port, "ok"]
    except socket.timeout:
        return [name, port, "timeout"]
    except ConnectionRefusedError:
        return [name, port, "refused"]
    except OSError as exc:
        return [name, port, type(exc).__name__]
with ThreadPoolExecutor(32) as pool:
    print(json.dumps(list(pool.map(probe, targets))))
"""


def listener_argv(ports: Sequence[int], seconds: float = LISTEN_SECONDS) -> list[str]:
    """Listen on every port nothing listens on yet, in a detached child that exits after `seconds`.

    A port something already listens on (Ray itself, on a re-run) is reported busy and probed as it is.
    """
    return ["python3", "-c", LISTENER, ",".join(str(p) for p in ports), str(seconds)]


def parse_listener(stdout: str) -> tuple[list[int], int | None]:
    """(ports something else already listens on, the listener's pid to stop once the probes are done)."""
    values = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    busy = [int(p) for p in values.get("busy", "").split(",") if p.strip()]
    pid = values.get("pid", "").strip()
    return busy, int(pid) if pid.isdigit() else None


def stop_listener_argv(pid: int) -> list[str]:
    return ["kill", str(pid)]


def probe_argv(targets: Sequence[tuple[str, str, int]], timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    return ["python3", "-c", PROBE, json.dumps([list(t) for t in targets]), str(timeout_s)]


def parse_probe(source: str, stdout: str) -> list[ProbeResult]:
    rows = json.loads(stdout.strip().splitlines()[-1])
    return [ProbeResult(source, str(name), int(port), str(outcome)) for name, port, outcome in rows]


def probe_targets(
    cluster: ClusterSpec, source: str, addresses: Mapping[str, str]
) -> list[tuple[str, str, int]]:
    # data parallel: only the head listens on a pinned port (the DP RPC port every node's engines dial)
    targets = cluster.hosts[:1] if cluster.launcher == "data_parallel" else cluster.hosts
    return [
        (host, addresses[host], port)
        for host in targets
        if host != source and host in addresses
        for port in cluster_ports(cluster)
    ]
