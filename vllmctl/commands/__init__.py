"""Subcommands: each module exposes `register(subparsers)` and sets `func(args, ui) -> exit code`; modules are
discovered, so adding a command is adding a file. Commands parse flags, call the runner and print."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def _modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


COMMAND_MODULES: list[ModuleType] = _modules()
