"""The shared options mean the same on every command: one declaration, one help text, one timeout policy."""

from __future__ import annotations

import argparse

from vllmctl import cli
from vllmctl.commands import _options as options

SHARED = ("--limit", "--forks", "--timeout", "--json", "--yes")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_each_shared_option_has_one_help_text_across_commands() -> None:
    helps: dict[str, set[str]] = {name: set() for name in SHARED}
    for sub in _subparsers().values():
        for action in sub._actions:
            for flag in set(action.option_strings) & set(SHARED):
                if flag not in ("--timeout", "--yes"):  # their defaults and verbs are stated in the text
                    helps[flag].add(str(action.help))
    assert {flag: len(texts) for flag, texts in helps.items() if len(texts) > 1} == {}


def test_timeout_is_per_remote_command_with_one_default_for_reads_and_one_for_changes() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["facts", "inv.yml"]).timeout == options.READ_TIMEOUT_S
    assert parser.parse_args(["status", "inv.yml"]).timeout == options.READ_TIMEOUT_S
    assert parser.parse_args(["apply", "inv.yml"]).timeout == options.CHANGE_TIMEOUT_S
    # the old spelling still works and lands on the same setting
    assert parser.parse_args(["apply", "inv.yml", "--command-timeout", "3"]).timeout == 3.0
    args = parser.parse_args(["apply", "inv.yml", "--timeout", "900"])
    assert options.bookkeeping_timeout(args) == options.BOOKKEEPING_TIMEOUT_S
