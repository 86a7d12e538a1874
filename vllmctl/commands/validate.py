"""`vllmctl validate`: check an inventory and report every problem, or print the inventory JSON Schema.

Unless told not to, it also checks the controller's own files the inventory names (the edge: LocalFiles).
"""

from __future__ import annotations

import argparse
from typing import Any

from vllmctl.commands import _options as options
from vllmctl.console import Ui
from vllmctl.errors import EXIT_OK, InputError, InvalidInputError, Problem
from vllmctl.inventory import inventory_schema, load_inventory
from vllmctl.inventory.controller import LocalFiles


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "validate",
        help="check an inventory and report every problem",
        description="Check an inventory or an Ansible YAML inventory; report all problems at file:line:col.",
    )
    parser.add_argument("inventory", nargs="?", metavar="INVENTORY", help="inventory YAML file")
    options.add_json(parser)
    parser.add_argument("--schema", action="store_true", help="print the inventory JSON Schema and exit")
    parser.add_argument(
        "--no-controller-checks",
        action="store_true",
        help="check the file alone, not this machine's SSH keys, known_hosts, secret files and model folders "
        "(e.g. in CI away from the controller)",
    )
    parser.set_defaults(func=run)


def _problem_json(problem: Problem) -> dict[str, Any]:
    where = problem.location
    return {
        "file": where.file,
        "line": where.line,
        "column": where.column,
        "path": where.path,
        "message": problem.message,
        "hint": problem.hint,
    }


def run(args: argparse.Namespace, ui: Ui) -> int:
    if args.schema:
        ui.json(inventory_schema())
        return EXIT_OK
    if not args.inventory:
        raise InputError("no inventory given", "usage: vllmctl validate INVENTORY [--json], or --schema")
    try:
        inventory = load_inventory(args.inventory, None if args.no_controller_checks else LocalFiles())
    except InvalidInputError as exc:
        if args.json:
            summary = {"file": args.inventory, "problems": len(exc.problems)}
            ui.json({"ok": False, "problems": [_problem_json(p) for p in exc.problems], "summary": summary})
        else:
            for problem in exc.problems:
                ui.error(problem.render())
            ui.info(f"{args.inventory}: {exc.message}")
        return exc.exit_code
    counts = {"hosts": len(inventory.hosts), "groups": len(inventory.groups), "models": len(inventory.models)}
    if args.json:
        ui.json({"ok": True, "problems": [], "summary": {"file": args.inventory, **counts}})
    else:
        hosts, groups, models = counts["hosts"], counts["groups"], counts["models"]
        ui.data(f"{args.inventory}: ok ({hosts} hosts, {groups} groups, {models} models)")
    return EXIT_OK
