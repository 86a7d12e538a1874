"""Subcommands: each module exposes `register(subparsers)` and sets `func(args, ui) -> exit code`; modules are
discovered, so adding a command is adding a file named after it. Commands parse flags, call the runner and
print.

Only the command being run is imported (`vllmctl apply` does not import status, bench or lab and the HTTP
stacks they pull in); `--help` and the parser tests load them all."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def command_names() -> list[str]:
    """The command modules' names, which are the commands' names, without importing them."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def command_modules(only: str | None = None) -> list[ModuleType]:
    """Every command module, or only the one named `only` when there is one by that name."""
    names = command_names()
    return [load(only)] if only in names else [load(name) for name in names]
