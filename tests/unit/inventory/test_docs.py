"""docs/inventory.md is generated from the schema and covers every schema property."""

from __future__ import annotations

from pathlib import Path

from vllmctl.inventory.docs import render_reference, schema_property_paths

DOCS = Path(__file__).resolve().parents[3] / "docs" / "inventory.md"


def test_committed_docs_equal_the_generated_reference() -> None:
    assert DOCS.read_text(encoding="utf-8") == render_reference(), (
        "regenerate: python -m vllmctl.inventory.docs > docs/inventory.md"
    )


def test_reference_covers_every_schema_property() -> None:
    text = render_reference()
    paths = schema_property_paths()
    assert len(paths) > 50
    missing = [path for path in paths if f"| `{path.split('.', 1)[1]}` |" not in text]
    assert missing == []
