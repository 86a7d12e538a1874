"""Subcommands: each module here exposes `register(subparsers)` and sets `func(args, ui) -> exit code`.

Modules are discovered, so adding a command is adding a file; `pending` fills in the names nobody built.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def _modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "pending")
    found = [importlib.import_module(f"{__name__}.{name}") for name in names]
    return [*found, importlib.import_module(f"{__name__}.pending")]


COMMAND_MODULES: list[ModuleType] = _modules()
