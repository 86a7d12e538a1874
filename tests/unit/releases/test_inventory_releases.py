"""The inventory's `releases: {keep: N}`: loaded with its default, checked by the schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory

HEAD = "vllmctl: 1\nhosts:\n  gpu-01: {address: 10.0.0.1}\n"


def load(tmp_path: Path, text: str) -> Inventory:
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return load_inventory(str(path))


def test_keep_is_read_and_defaults_to_five(tmp_path: Path) -> None:
    assert load(tmp_path, HEAD).releases.keep == 5
    assert load(tmp_path, HEAD + "releases: {keep: 2}\n").releases.keep == 2


def test_keep_below_one_and_unknown_keys_are_refused_with_their_place(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as raised:
        load(tmp_path, HEAD + "releases: {keep: 0, kept: 3}\n")
    rendered = raised.value.render()
    assert "inv.yml:4" in rendered and "releases" in rendered
    assert len(raised.value.problems) == 2
