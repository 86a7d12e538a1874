"""`vllmctl cluster INVENTORY MODEL`: Ray into each node's engine venv, the preflight, then the Ray
cluster (head, workers, `ray status` barrier) and, with `--start-engine`, vLLM on the head. Nothing starts
when the preflight finds a problem.
"""

from __future__ import annotations

import argparse
from typing import Any

from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, EXIT_OK, InputError
from vllmctl.inventory import load_inventory
from vllmctl.multinode.plan import clusters_for, plan_cluster
from vllmctl.planner.inventory_plan import plan_inventory
from vllmctl.runner.cluster import cluster_status, prepare_nodes, run_preflight, start_cluster
from vllmctl.runner.fleet import load_model_archs


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("cluster", help="preflight and bring up the Ray cluster of a multi-node model")
    parser.add_argument("inventory", help="inventory file")
    parser.add_argument("model", help="the multi-node model's name")
    parser.add_argument("--preflight-only", action="store_true", help="check the hosts; start nothing")
    parser.add_argument("--start-engine", action="store_true", help="start vLLM on the head once Ray formed")
    parser.add_argument(
        "--status", action="store_true", help="show the group's units and Ray nodes; change nothing"
    )
    parser.add_argument("--offline", action="store_true", help="never fetch config.json from the hub")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per host and preflight step")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ui: Ui) -> int:
    inv = load_inventory(args.inventory)
    model = inv.models.get(args.model)
    if model is None:
        raise InputError(f"no model named {args.model!r}", f"models: {', '.join(inv.models) or 'none'}")
    archs, failures = load_model_archs(inv, online=not args.offline)
    if model.source in failures:
        raise failures[model.source]
    cluster = clusters_for(inv, plan_inventory(inv, None, archs).entries).get(model.name)
    if cluster is None:
        raise InputError(
            f"model {model.name!r} is not multi-node",
            "serve it on a group with multi_node: true (see docs/multinode.md)",
        )
    plan = plan_cluster(inv, model, cluster, None, archs.get(model.source))
    engine = model.engine or inv.hosts[plan.head].engine
    ui.info(f"{model.name}: PP {plan.pp} x TP {plan.tp} on {', '.join(plan.hosts)} (head {plan.head})")
    if args.status:
        return _show_status(ui, cluster_status(inv, plan, engine, args.timeout), args.json)
    if not args.preflight_only:
        prepare_nodes(inv, plan, engine, engine.index_url, ui.info)
    report = run_preflight(inv, model, cluster, engine, timeout_s=args.timeout)
    if not report.ok:
        for problem in report.problems:
            ui.error(problem.render())
        ui.error(f"preflight: {len(report.problems)} problem(s); nothing was started")
        if args.json:
            ui.json({"ok": False, "problems": [vars(p) for p in report.problems]})
        return EXIT_FAILURE
    ui.info(f"preflight passed on {', '.join(cluster.hosts)}")
    if args.preflight_only:
        if args.json:
            ui.json({"ok": True, "problems": []})
        return EXIT_OK
    addresses = {host: found.interface_ip or inv.hosts[host].address for host, found in report.facts.items()}
    status = start_cluster(inv, plan, engine, addresses, args.start_engine, ui.info)
    if args.json:
        ui.json({"ok": True, "problems": [], "ray_nodes": status.nodes, "ray_gpus": status.gpus})
    return EXIT_OK


def _show_status(ui: Ui, status: dict[str, Any], as_json: bool) -> int:
    healthy = bool(status["formed"]) and all(state == "active" for state in status["ray_units"].values())
    if as_json:
        ui.json({**status, "ok": healthy})
    else:
        units = ", ".join(f"{host} {state}" for host, state in status["ray_units"].items())
        ui.data(f"group {status['group']} (head {status['head']}): Ray units: {units}")
        ui.data(f"ray status: {status['ray_nodes']} nodes, {status['ray_gpus']:g} GPUs")
        ui.data(f"{status['engine_unit']} on {status['head']}: {status['engine']}")
    return EXIT_OK if healthy else EXIT_FAILURE
