"""The options commands share, declared once with one meaning each: which hosts (`--limit`), how many at once
(`--forks`), how long one remote command may take (`--timeout`, the one timeout policy), `--json`, `--yes`."""

from __future__ import annotations

import argparse

from vllmctl.runner import DEFAULT_FORKS

__all__ = ["DEFAULT_FORKS"]
# Reads (facts, status, history) answer in seconds; changes (apply, rollback) run package installs and model
# copies as one command. Bookkeeping steps (release records, pointers, journal tails) never wait longer.
READ_TIMEOUT_S = 60.0
CHANGE_TIMEOUT_S = 600.0
BOOKKEEPING_TIMEOUT_S = 120.0


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
    return min(float(args.timeout), BOOKKEEPING_TIMEOUT_S)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def add_yes(parser: argparse.ArgumentParser, what: str = "do it") -> None:
    parser.add_argument("--yes", action="store_true", help=f"{what}; without it, only show what would happen")
