"""`status` on a drained server: its state says whether a run holds it, and a line says whose or why none."""

from __future__ import annotations

import io

from rich.console import Console

from vllmctl.status.view import drain_lines, gateway_table

GONE = "ops@ctl pid=12 boot=b1 cmd=apply"
SAID = f"no run holds it: its run died ({GONE}); the next apply puts it back"
VIEW = {
    "gw-1": {
        "servers": {
            "tiny/a-8000": {"status": "DRAIN", "sessions": 0, "queued": 0, "check": "L7OK",
                            "holder": {"held_by": GONE, "run_gone": True, "orphan": True,
                                       "said": SAID}},
            "tiny/b-8000": {"status": "UP", "sessions": 1, "queued": 0, "check": "L7OK"},
        }
    }
}  # fmt: skip


def test_a_drained_server_no_run_holds_is_said_in_the_table_and_a_line() -> None:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(gateway_table(VIEW))
    assert "DRAIN (no run holds it)" in out.getvalue()
    assert drain_lines(VIEW) == [f"gateway gw-1: tiny/a-8000 is DRAIN: {SAID}"]
