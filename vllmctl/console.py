"""The one rich console: messages to stderr, data to stdout, no markup read from remote text.

Plain output when not a TTY or when NO_COLOR is set; `--json` writes machine data to stdout only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

# Piped output is read by scripts and logs, not a terminal: wide enough that tables keep whole values.
PIPED_WIDTH = 200


def _make(stream: TextIO) -> Console:
    no_color = bool(os.environ.get("NO_COLOR"))
    tty = stream.isatty()
    width = None if tty or os.environ.get("COLUMNS") else PIPED_WIDTH
    return Console(
        file=stream,
        markup=False,
        highlight=False,
        emoji=False,
        no_color=no_color,
        soft_wrap=not tty,
        width=width,
    )


class Ui:
    """What commands print through: `data` goes to stdout, everything for people to stderr."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = _make(out or sys.stdout)
        self.err = _make(err or sys.stderr)

    def json(self, payload: Any) -> None:
        self.out.file.write(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
        self.out.file.flush()

    def json_line(self, payload: Any) -> None:
        """One compact JSON document per line (a stream: `status --watch --json`)."""
        self.out.file.write(json.dumps(payload, sort_keys=True, default=str) + "\n")
        self.out.file.flush()

    def data(self, text: str) -> None:
        self.out.print(text)

    def table(self, table: Table) -> None:
        self.out.print(table)

    def info(self, text: str) -> None:
        self.err.print(text)

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {text}", style="yellow")

    def error(self, text: str) -> None:
        self.err.print(f"error: {text}", style="red")
