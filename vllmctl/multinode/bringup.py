"""Bringing a Ray cluster up, pure: the commands each node runs (service user, Ray dir, Ray in the engine
venv, units), the order (head, then workers, then vLLM on the head), and reading `ray status`.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from vllmctl.inventory.model import ClusterSpec, EngineSpec
from vllmctl.ops.engine import index_source
from vllmctl.paths import HOME_DIR, RAY_DIR, SERVICE_USER, UNIT_DIR, VLLM_CLI_HELPER
from vllmctl.render.quoting import shell_join, shell_word
from vllmctl.tasks.desired import venv_path


@dataclass(frozen=True)
class RayStatus:
    nodes: int
    gpus: float


def node_setup_script() -> str:
    """The unprivileged service user and Ray's own directory (sessions, sockets, logs) owned by it."""
    user = shell_word(SERVICE_USER)
    home = shell_word(HOME_DIR)
    return "\n".join(
        [
            "set -e",
            f"id -u {user} >/dev/null 2>&1 || "
            f"useradd --system --home-dir {home} --shell /usr/sbin/nologin {user}",
            f"install -d -m 0750 -o {user} -g {user} {home} {shell_word(RAY_DIR)}",
        ]
    )


def ray_install_script(
    engine: EngineSpec, cluster: ClusterSpec, index_url: str | None, credentials: str | None = None
) -> str:
    """Ray into the engine venv (created if absent), only when the venv lacks that exact version."""
    venv = venv_path(engine)
    python = shell_word(f"{venv}/bin/python")
    wanted = f"ray=={cluster.ray.version}"
    index = index_source(index_url, credentials, uv=False)  # credentials come through ray_install_stdin
    check = f"import importlib.metadata as m; assert m.version('ray') == {cluster.ray.version!r}"
    install = [
        f"{venv}/bin/python",
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        *index.options,
        wanted,
    ]
    return "\n".join(
        [
            "set -e",
            *index.prelude(),
            f"[ -x {python} ] || python3 -m venv {shell_word(venv)}",
            f"{python} -c {shell_word(check)} 2>/dev/null || {shell_join(install)}",
        ]
    )


def cli_helper_script() -> str:
    """Writes the script that runs vLLM's CLI (launcher vllm) from stdin, replaced whole."""
    path = shell_word(VLLM_CLI_HELPER)
    temp = shell_word(f"{VLLM_CLI_HELPER}.tmp")
    return "\n".join(
        [
            "set -e",
            f"install -d -m 0755 {shell_word(posixpath.dirname(VLLM_CLI_HELPER))}",
            f"cat > {temp}",
            f"chmod 0644 {temp}",
            f"mv -f {temp} {path}",
        ]
    )


def ray_install_stdin(index_url: str | None, credentials: str | None = None) -> bytes:
    return index_source(index_url, credentials, uv=False).stdin


def unit_path(name: str) -> str:
    return f"{UNIT_DIR}/{name}"


def start_script(unit: str) -> str:
    """Reload and (re)start: a changed unit must take effect; an unchanged running one restarts harmlessly."""
    name = shell_word(unit)
    return f"systemctl daemon-reload && systemctl enable --quiet {name} && systemctl restart {name}"


def ray_status_argv(engine: EngineSpec, head_ip: str, gcs_port: int) -> list[str]:
    return [f"{venv_path(engine)}/bin/ray", "status", f"--address={head_ip}:{gcs_port}"]


_ACTIVE = re.compile(r"^Active:\s*$(?P<body>.*?)^\S", re.MULTILINE | re.DOTALL)
_NODE_LINE = re.compile(r"^\s*\d+\s+node_[0-9a-f]+", re.MULTILINE)
_GPU_LINE = re.compile(r"^\s*[\d.]+/(?P<total>[\d.]+)\s+GPU\b", re.MULTILINE)


def parse_ray_status(text: str) -> RayStatus:
    """Alive nodes (the `Active:` section of `ray status`) and the cluster's total GPUs."""
    active = _ACTIVE.search(text + "\nEND")
    nodes = len(_NODE_LINE.findall(active.group("body"))) if active else 0
    gpus = _GPU_LINE.search(text)
    return RayStatus(nodes, float(gpus.group("total")) if gpus else 0.0)


def cluster_formed(status: RayStatus, nodes: int, gpus_per_node: int) -> str | None:
    """None when the cluster has every node and GPU it should, else what is missing."""
    if status.nodes < nodes:
        return f"{status.nodes} of {nodes} Ray nodes alive"
    if status.gpus < nodes * gpus_per_node:
        return f"{status.gpus:g} of {nodes * gpus_per_node} GPUs registered"
    return None
