"""The rules through Prometheus's own tooling: `promtool check rules` on the exported file, and `promtool test
rules` with one test file per alert (tests/unit/observe/promtool/<alert>.yml: it fires on the series that
should fire it, and not before its `for` window or on the ones beside them). Skipped without promtool
(Debian's `prometheus` package, which .ci/run installs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vllmctl.inventory.model import Inventory
from vllmctl.observe import alerts

PROMTOOL = shutil.which("promtool")
TESTS = Path(__file__).resolve().parent / "promtool"
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)"
)


@pytest.fixture
def rules_dir(fleet: Inventory, tmp_path: Path) -> Path:
    (tmp_path / "rules.yml").write_text(alerts.to_yaml(alerts.rules(fleet)))
    return tmp_path


def _promtool(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *argv], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_check_rules_passes(rules_dir: Path) -> None:
    done = _promtool("check", "rules", "rules.yml", cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_test_file(fleet: Inventory) -> None:
    names = {rule["alert"] for group in alerts.rules(fleet)["groups"] for rule in group["rules"]}
    assert {path.stem for path in TESTS.glob("*.yml")} == names


@pytest.mark.parametrize("test_file", sorted(TESTS.glob("*.yml")), ids=lambda path: path.stem)
def test_rule_unit_tests_hold(rules_dir: Path, test_file: Path) -> None:
    shutil.copy(test_file, rules_dir / test_file.name)
    done = _promtool("test", "rules", test_file.name, cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_query_is_promql_prometheus_parses(fleet: Inventory, tmp_path: Path) -> None:
    """Each panel's query (its replica variable set to `.*`), as a recording rule, parses in promtool."""
    import json
    import re

    from vllmctl.observe.dashboard import build, to_json

    board = json.loads(to_json(build(fleet)))
    queries = [t["expr"] for row in board["panels"] for panel in row["panels"] for t in panel["targets"]]
    records = [
        {"record": f"vllmctl:panel_{i}", "expr": re.sub(r"\$replica_\w+", ".*", q)}
        for i, q in enumerate(queries)
    ]
    (tmp_path / "panels.yml").write_text(alerts.to_yaml({"groups": [{"name": "panels", "rules": records}]}))
    done = _promtool("check", "rules", "panels.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(records)} rules found" in done.stdout
