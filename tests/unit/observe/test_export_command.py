"""`vllmctl export grafana` and `export alerts`: what they print, and the files they write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vllmctl import cli
from vllmctl.commands.export import DASHBOARD_FILE, DEFAULT_DASHBOARDS_DIR


def test_grafana_prints_the_dashboard(fleet_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", "grafana", str(fleet_file)]) == 0
    board = json.loads(capsys.readouterr().out)
    assert board["uid"] == "vllmctl-fleet"
    assert [row["title"].split(" (")[0] for row in board["panels"]] == ["llama-8b", "old-model", "qwen-sg"]


def test_grafana_output_writes_the_dashboard_alone(
    fleet_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "board.json"
    assert cli.main(["export", "grafana", str(fleet_file), "--output", str(target)]) == 0
    assert f"wrote the dashboard to {target}" in capsys.readouterr().err
    assert json.loads(target.read_text())["uid"] == "vllmctl-fleet"


def test_grafana_writes_the_dashboard_and_its_provisioning(
    fleet_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "grafana"
    argv = [
        "export",
        "grafana",
        str(fleet_file),
        "--output-dir",
        str(out),
        "--prometheus-url",
        "http://p:9090",
    ]
    assert cli.main(argv) == 0
    assert f"wrote the dashboard and its provisioning files to {out}" in capsys.readouterr().err
    assert sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file()) == [
        "provisioning/dashboards/vllmctl.yaml",
        "provisioning/datasources/vllmctl.yaml",
        DASHBOARD_FILE,
    ]
    assert json.loads((out / DASHBOARD_FILE).read_text())["title"] == "vllmctl fleet"
    datasources = yaml.safe_load((out / "provisioning/datasources/vllmctl.yaml").read_text())
    assert datasources["datasources"][0]["url"] == "http://p:9090"
    providers = yaml.safe_load((out / "provisioning/dashboards/vllmctl.yaml").read_text())
    assert providers["providers"][0]["options"]["path"] == DEFAULT_DASHBOARDS_DIR


def test_alerts_print_and_write_the_rules(
    fleet_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "alerts", str(fleet_file)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    target = tmp_path / "vllmctl-alerts.yml"
    assert cli.main(["export", "alerts", str(fleet_file), "--output", str(target)]) == 0
    assert f"wrote the alerting rules to {target}" in capsys.readouterr().err
    assert yaml.safe_load(target.read_text()) == printed
    assert printed["groups"][0]["rules"][0]["alert"] == "VllmctlEngineDown"


def test_an_output_dir_that_cannot_be_made_is_an_input_error(
    fleet_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["export", "grafana", str(fleet_file), "--output-dir", str(blocker / "x")]) == 2
    assert "cannot create" in capsys.readouterr().err
