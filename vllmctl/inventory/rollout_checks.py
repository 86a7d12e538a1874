"""Checks on a model's rollout bounds the schema cannot express: a canary that leaves no host after it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllmctl.inventory.resolve import mapping

if TYPE_CHECKING:
    from vllmctl.inventory.resolve import Checker


def check_rollout(checker: Checker, name: str, model: dict[str, Any]) -> None:
    """`canary.hosts` must leave at least one host of the model to follow it (a lone host needs none)."""
    hosts = len(checker.resolved.model_hosts.get(name, ()))
    canary = mapping(model.get("canary")).get("hosts")
    if isinstance(canary, int) and not isinstance(canary, bool) and hosts > 1 and canary >= hosts:
        checker.add(
            ("models", name, "canary", "hosts"),
            f"a canary of {canary} host(s) is every one of the model's {hosts} hosts: "
            "none is left to follow it",
            f"give canary.hosts fewer than {hosts} (1 is the default), or 0 for no canary",
        )
