"""Reading a config.json's fields as every architecture parser does: the first int among alias keys, the text
model's part of a vision-language config, and a dtype name's bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


def first_int(config: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    """The first of `keys` the config holds as an int (a bool is not one), else `default`."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's fields: a vision-language config's nested text_config, else the config itself."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config
