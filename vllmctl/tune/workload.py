"""Recorded request shapes for `vllmctl tune --workload FILE` (pure): a JSONL file, one
`{"input_tokens": N, "output_tokens": M}` per request, bounded in lines and in tokens; every problem names
the file and line."""

from __future__ import annotations

import json

from vllmctl.errors import InputError

MAX_SHAPES = 100_000
MAX_TOKENS = 1_048_576


def parse_workload(text: str, path: str) -> tuple[tuple[int, int], ...]:
    shapes: list[tuple[int, int]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(shapes) == MAX_SHAPES:
            raise InputError(f"{path}:{number}: more than {MAX_SHAPES:,} request shapes", "sample the file")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not JSON ({exc.msg})", "one JSON object per line") from exc
        shape = []
        for field in ("input_tokens", "output_tokens"):
            value = record.get(field) if isinstance(record, dict) else None
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS:
                raise InputError(
                    f"{path}:{number}: {field} must be an integer from 1 to {MAX_TOKENS:,}, not {value!r}",
                    'e.g. {"input_tokens": 512, "output_tokens": 128}',
                )
            shape.append(value)
        shapes.append((shape[0], shape[1]))
    if not shapes:
        raise InputError(f"{path}: no request shapes", 'one {"input_tokens": N, "output_tokens": M} per line')
    return tuple(shapes)
