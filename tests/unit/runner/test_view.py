"""What people see: the plan lines, failure reasons with the stderr tail, and the recap table."""

from __future__ import annotations

import io

from vllmctl.console import Ui
from vllmctl.ops import Command, Step
from vllmctl.runner.core.results import HostResult, RunResult, StepResult
from vllmctl.runner.core.view import Progress, show_failures, show_plan, show_recap


def _ui() -> tuple[Ui, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Ui(out, err), out, err


def _result(check: bool) -> RunResult:
    reload = Step("systemd_unit", "u.service", (Command(("systemctl", "daemon-reload")),))
    ok = Step("directory", "/etc/vllmctl", noop="directory /etc/vllmctl exists with mode 0755")
    good = HostResult("a", steps=[StepResult("base", ok, "ok"), StepResult("models", reload, "planned")])
    bad = HostResult(
        "b",
        "failed",
        [StepResult("models", reload, "failed", "systemctl daemon-reload: exit 1", "E: [boom]")],
        error="systemd_unit u.service: systemctl daemon-reload: exit 1",
    )
    gone = HostResult("c", "unreachable", error="c (ops@10.0.0.3:22): unreachable", hint="check the address")
    return RunResult("site", check, {"a": good, "b": bad, "c": gone})


def test_plan_lists_changes_with_their_commands() -> None:
    ui, out, _ = _ui()
    show_plan(ui, _result(check=True))
    assert out.getvalue() == (
        "a: would change: [models] systemd_unit u.service\n"
        "    systemctl daemon-reload\n"
        "b: FAILED: [models] systemd_unit u.service\n"
        "    systemctl daemon-reload\n"
    )


def test_verbose_plan_shows_noop_reasons() -> None:
    ui, out, _ = _ui()
    show_plan(ui, _result(check=False), verbose=True)
    assert out.getvalue().startswith(
        "a: ok: directory /etc/vllmctl: directory /etc/vllmctl exists with mode 0755\n"
    )


def test_failures_show_reason_hint_and_stderr_tail_verbatim() -> None:
    ui, _, err = _ui()
    show_failures(ui, _result(check=False))
    text = err.getvalue()
    assert "error: b: failed: systemd_unit u.service: systemctl daemon-reload: exit 1\n" in text
    assert "E: [boom]" in text  # markup=False: brackets from the host are printed as they are
    assert "error: c: unreachable: c (ops@10.0.0.3:22): unreachable\n  hint: check the address" in text


def test_recap_counts_per_host() -> None:
    ui, _, err = _ui()
    show_recap(ui, _result(check=False))
    rows = [line.split() for line in err.getvalue().splitlines() if line.strip()[:2] in ("a ", "b ", "c ")]
    assert rows == [
        ["a", "1", "1", "0", "0", "0", "0.00s"],
        ["b", "0", "0", "1", "0", "0", "0.00s"],
        ["c", "0", "0", "0", "1", "0", "0.00s"],
    ]


def test_recap_off_a_terminal_is_plain_aligned_text() -> None:
    ui, _, err = _ui()
    show_recap(ui, _result(check=False))
    assert err.getvalue() == (
        "RECAP\n"
        "host  ok  changed  failed  unreachable  skipped   time\n"
        "a      1        1       0            0        0  0.00s\n"
        "b      0        0       1            0        0  0.00s\n"
        "c      0        0       0            1        0  0.00s\n"
    )


def test_progress_off_a_terminal_prints_plain_lines() -> None:
    ui, _, err = _ui()
    with Progress(ui, ["a"]) as progress:
        progress("a", "base", "directory /etc/vllmctl")
    assert err.getvalue() == "a: base: directory /etc/vllmctl\n"


def test_facts_summaries() -> None:
    from vllmctl.commands.facts import summarize

    gpus = {"status": "ok", "gpus": [{"index": 0, "name": "NVIDIA H100", "memory_total_mib": 81559}]}
    assert summarize("gpus", gpus) == "0: NVIDIA H100 81559 MiB"
    assert summarize("gpus", {"status": "no-driver", "message": "NVIDIA-SMI has failed"}) == (
        "no-driver: NVIDIA-SMI has failed"
    )
    assert summarize("releases", {"current": None, "known_good": None}) == "current=- known-good=-"
    assert summarize("python", None) == "-"
