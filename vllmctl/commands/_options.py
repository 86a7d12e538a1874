"""The options commands share, declared once with one meaning each: which hosts (`--limit`), how many at once
(`--forks`), how long one remote command may take (`--timeout`, the one timeout policy), `--json`, `--yes`."""

from __future__ import annotations

import argparse

from vllmctl.runner import (
    BOOKKEEPING_TIMEOUT_S,
    CHANGE_TIMEOUT_S,
    DEFAULT_FORKS,
    READ_TIMEOUT_S,
    bookkeeping_timeout_s,
)

__all__ = ["BOOKKEEPING_TIMEOUT_S", "CHANGE_TIMEOUT_S", "DEFAULT_FORKS", "READ_TIMEOUT_S"]


def add_limit(parser: argparse.ArgumentParser, *aliases: str) -> None:
    parser.add_argument("--limit", *aliases, dest="limit", help="comma list of hosts or groups")


def add_forks(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--forks", type=int, default=DEFAULT_FORKS, help=f"hosts worked on at once (default {DEFAULT_FORKS})"
    )


def add_timeout(parser: argparse.ArgumentParser, changes_hosts: bool = False) -> None:
    """`--timeout`: seconds any one remote command may take (`--command-timeout` is the old spelling)."""
    default = CHANGE_TIMEOUT_S if changes_hosts else READ_TIMEOUT_S
    names = ("--timeout", "--command-timeout") if changes_hosts else ("--timeout",)
    parser.add_argument(
        *names,
        dest="timeout",
        type=float,
        default=default,
        help=f"seconds one remote command may take (default {default:g})",
    )


def bookkeeping_timeout(args: argparse.Namespace) -> float:
    return bookkeeping_timeout_s(args.timeout)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def add_yes(parser: argparse.ArgumentParser, what: str = "do it") -> None:
    parser.add_argument("--yes", action="store_true", help=f"{what}; without it, only show what would happen")
