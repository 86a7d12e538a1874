"""The CLI frame: exit codes, honest 'not built yet', no tracebacks, one console with no markup."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from vllmctl import __version__, cli
from vllmctl.console import Ui
from vllmctl.errors import EXIT_USAGE

ALL_COMMANDS = {"validate", "plan", "apply", "rollback", "history", "status", "facts", "estimate", "lab"}


def test_every_documented_command_exists() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) >= ALL_COMMANDS


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"vllmctl {__version__}"


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == EXIT_USAGE
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_internal_error_becomes_a_message_and_a_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: argparse.Namespace, ui: Ui) -> int:
        raise RuntimeError("kaboom")

    real_build = cli.build_parser

    def build_with_broken_command(only: str | None = None) -> argparse.ArgumentParser:
        parser = real_build(only)
        parser.set_defaults(func=boom)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["history"].set_defaults(func=boom)
        return parser

    monkeypatch.setenv("VLLMCTL_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "build_parser", build_with_broken_command)
    assert cli.main(["history", "inventory.yml"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "unexpected internal error: RuntimeError: kaboom" in err
    logs = list(tmp_path.glob("vllmctl-debug-*.log"))
    assert len(logs) == 1
    assert str(logs[0]) in err
    assert "Traceback" in logs[0].read_text()


def test_console_never_reads_markup_and_splits_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out, err = io.StringIO(), io.StringIO()
    ui = Ui(out=out, err=err)
    ui.info("remote said [bold]hi[/bold] and [red]")
    ui.json({"b": 1, "a": [1, 2]})
    assert err.getvalue() == "remote said [bold]hi[/bold] and [red]\n"
    assert json.loads(out.getvalue()) == {"a": [1, 2], "b": 1}
    assert "\x1b[" not in err.getvalue()


def test_apply_loads_the_gate_and_group_modules_only_when_a_run_needs_them() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, vllmctl.commands.apply\n"
        "print(' '.join(m for m in ('vllmctl.runner.multinode.apply_groups',"
        " 'vllmctl.runner.releases.release', 'vllmctl.runner.multinode.cluster_release',"
        " 'vllmctl.multinode.preflight', 'vllmctl.bench.smoke')"
        " if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == ""  # a no-op or --check of the units playbook never uses them
