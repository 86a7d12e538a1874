"""What `load_inventory` makes of one inventory text: its problems as 'message | hint' lines ([] if it loads),
so an imported (INI) value and its native twin can be held to the same verdict."""

from __future__ import annotations

from pathlib import Path

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory


def verdict(workdir: Path, name: str, text: str) -> list[str]:
    (workdir / name).write_text(text)
    try:
        load_inventory(name)
    except InvalidInputError as exc:
        return [f"{p.message} | {p.hint}" for p in exc.problems]
    return []
