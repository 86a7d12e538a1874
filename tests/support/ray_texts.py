"""`ray status` output as Ray 2.60 prints it, for the tests that read it (preflight barrier, group status)."""

from __future__ import annotations

_TEMPLATE = """\
======== Autoscaler status: 2026-11-21 10:00:00.000000 ========
Node status
---------------------------------------------------------------
Active:
{nodes}Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/4.0 CPU
 0.0/{gpus} GPU
 0B/1.86GiB memory
"""
NODE_IDS = ("node_4f1d8a2b9c", "node_77e0aa31cd")


def ray_status(nodes: int, gpus: float) -> str:
    """What `ray status` prints with `nodes` alive (at most two) and `gpus` GPUs in all."""
    return _TEMPLATE.format(nodes="".join(f" 1 {node}\n" for node in NODE_IDS[:nodes]), gpus=f"{gpus:.1f}")
