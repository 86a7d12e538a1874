"""Commands whose capability is not built yet: they say so plainly and exit non-zero."""

from __future__ import annotations

import argparse

from vllmctl.console import Ui
from vllmctl.errors import NotBuiltError

PENDING: dict[str, tuple[str, str]] = {}


def _register_one(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    summary, issue = PENDING[name]
    parser = sub.add_parser(name, help=f"{summary} (not built yet)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(args: argparse.Namespace, ui: Ui) -> int:
        raise NotBuiltError(name, issue)

    parser.set_defaults(func=run)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name in PENDING:
        if name not in sub.choices:
            _register_one(sub, name)
