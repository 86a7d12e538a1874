"""The runner's folders as docs/architecture.md maps them: each folder's modules exactly as listed, and
imports only down the map's table (a folder never imports one above it, so no two folders import each
other)."""

from __future__ import annotations

import re
from pathlib import Path

from source_imports import imports_of

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "vllmctl" / "runner"
HEADING = "## The runner, by flow"


def mapped() -> list[tuple[str, set[str]]]:
    """(folder relative to runner/, "" for runner/ itself; its modules) per row, top row first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index(HEADING) :].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`runner/"):
            continue
        folder = cells[0].strip("`").removeprefix("runner/").rstrip("/")
        rows.append((folder, set(re.findall(r"`([a-z_0-9]+\.py)`", cells[1]))))
    return rows


def folder_of(module: str) -> str | None:
    """The runner folder a `vllmctl.runner...` module name lives in ("" for runner/'s own modules)."""
    parts = module.split(".")
    if parts[:2] != ["vllmctl", "runner"] or len(parts) < 3:
        return None
    if (RUNNER / parts[2]).is_dir():
        return parts[2]
    return "" if (RUNNER / f"{parts[2]}.py").exists() else None  # else a name runner/__init__.py defines


def test_every_runner_folder_holds_exactly_the_modules_the_map_lists() -> None:
    rows = mapped()
    assert len(rows) >= 5, "the map's table was not found"
    folders = [RUNNER, *(d for d in RUNNER.iterdir() if (d / "__init__.py").exists())]
    on_disk = {
        ("" if folder == RUNNER else folder.name): {p.name for p in folder.glob("*.py")} - {"__init__.py"}
        for folder in folders
    }
    assert dict(rows) == on_disk


def test_runner_folders_import_only_folders_below_them_in_the_map() -> None:
    order = [folder for folder, _ in mapped()]
    upward = []
    for folder in order:
        if not folder:
            continue  # the flows at the top may import any folder
        for path in (RUNNER / folder).glob("*.py"):
            for name in imports_of(path):
                target = folder_of(name)
                if target is None or target == folder or name == "vllmctl.runner":
                    continue
                if target == "" or order.index(target) < order.index(folder):
                    upward.append(f"{folder}/{path.name} imports {name}")
    assert upward == []
