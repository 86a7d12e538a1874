"""The options commands share, declared once with one meaning each: which hosts (`--limit`), how many at once
(`--forks`), how long one remote command may take (`--timeout`, the one timeout policy), `--json`, `--yes`,
and how a rollout that restarts engines stops (`--max-fail`, `--wait-available`)."""

from __future__ import annotations

import argparse

from vllmctl.releases.rollout import MaxFail
from vllmctl.releases.waves import MaxUnavailable
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


def max_fail(text: str) -> MaxFail:
    try:
        return MaxFail.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def max_unavailable(text: str) -> MaxUnavailable:
    try:
        return MaxUnavailable.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--{exc}") from exc


def add_max_unavailable(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-unavailable",
        type=max_unavailable,
        metavar="N|P%",
        help="hosts of each model (or percent of them) taken out of service at once, for this run: "
        "overrides every model's max_unavailable; never below min_available, after the canary",
    )


def add_rollout(parser: argparse.ArgumentParser) -> None:
    """`--max-fail` and `--wait-available`: when a rollout stops, and how long a host waits for its models'
    other replicas to serve before it is left as it was (docs/releases.md, "Rolling out")."""
    parser.add_argument(
        "--max-fail",
        type=max_fail,
        default=MaxFail(),
        metavar="N|P%",
        help="hosts (or percent of them) whose restart may fail before the rollout takes no further host "
        "out of service (default 0: the first failed host stops it)",
    )
    parser.add_argument(
        "--wait-available",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds a host waits for its models to keep min_available serving replicas elsewhere before "
        "it is left as it was (default 300); a replica this run is restarting is waited for as long as its "
        "own restart, health wait and gate take, and these seconds count from when it is back",
    )
