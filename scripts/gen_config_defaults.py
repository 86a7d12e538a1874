"""Writes vllmctl/catalog/config_defaults.json: the class defaults of every transformers config class, for the
keys the planner reads, so a config.json that leaves them out is read as transformers (and so vLLM) reads it.

Usage: python scripts/gen_config_defaults.py [--check]   (needs transformers; torch is not needed)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vllmctl.catalog.hf_classes import class_entry

OUT = Path(__file__).resolve().parent.parent / "vllmctl" / "catalog" / "config_defaults.json"


def generate() -> dict[str, Any]:
    import transformers
    from transformers import CONFIG_MAPPING

    table: dict[str, Any] = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # a class whose module needs an optional dependency
            continue
        entry = class_entry(cls)
        if entry:
            table[model_type] = entry
    return {"transformers_version": transformers.__version__, "model_types": table}


def render(data: dict[str, Any]) -> str:
    """One line per model type, so a regenerated table diffs by model."""
    lines = [f'  "{key}": {json.dumps(value, sort_keys=True)}' for key, value in data["model_types"].items()]
    head = f'{{"transformers_version": {json.dumps(data["transformers_version"])}, "model_types": {{\n'
    return head + ",\n".join(lines) + "\n}}\n"


def main(argv: list[str]) -> int:
    text = render(generate())
    if "--check" in argv:
        if OUT.read_text() != text:
            print(f"{OUT} drifted from transformers' classes: rerun scripts/gen_config_defaults.py")
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
