"""What a fact is: a shell command (optionally built from arguments) plus a pure parser of its output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllmctl.render.quoting import shell_join

Parser = Callable[[str, int], Any]


@dataclass(frozen=True)
class Fact:
    """`command(args)` is run on the host; `parse(output, exit_code)` turns what it printed into data."""

    name: str
    build: Callable[[tuple[str, ...]], str]
    parse: Parser
    needs_args: bool = False

    def command(self, args: tuple[str, ...] = ()) -> str:
        return self.build(args)


def fixed(command: str) -> Callable[[tuple[str, ...]], str]:
    def build(args: tuple[str, ...]) -> str:
        return command

    return build


def quoted_words(args: tuple[str, ...]) -> str:
    return shell_join(args)


def lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]
