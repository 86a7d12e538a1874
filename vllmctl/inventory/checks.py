"""Semantic checks the schema cannot express, run in order over one inventory: names, engine args and GPU fit,
adapters and speculative decoding, rollout bounds, multi_node groups, hosts, env names, ports, the gateway,
and (when asked) the controller's own files."""

from __future__ import annotations

from vllmctl.inventory.adapter_checks import check_adapters
from vllmctl.inventory.clusters import check_clusters
from vllmctl.inventory.controller import check_controller
from vllmctl.inventory.engine_checks import check_engine_args, check_gpu_fit
from vllmctl.inventory.env_checks import check_env
from vllmctl.inventory.gateway_checks import check_gateway
from vllmctl.inventory.host_checks import check_hosts, check_names
from vllmctl.inventory.ports import check_ports
from vllmctl.inventory.resolve import Checker, Resolved, mapping
from vllmctl.inventory.rollout_checks import check_rollout


def run_checks(checker: Checker) -> Resolved:
    """Resolves hosts and groups, then runs every check; problems collect on the checker."""
    checker.merge_hosts()
    checker.resolve_groups()
    check_names(checker)
    for name, model in mapping(checker.data.get("models")).items():
        if isinstance(model, dict):
            checker.resolved.model_hosts[name] = checker.model_hosts(name, model)
            check_engine_args(checker, name, model)
            check_gpu_fit(checker, name, model)
            check_adapters(checker, name, model)
            check_rollout(checker, name, model)
    check_clusters(checker)
    check_hosts(checker)
    check_env(checker)
    check_ports(checker)
    check_gateway(checker)
    if checker.files is not None:
        check_controller(checker, checker.files)
    return checker.resolved
