"""`vllmctl plan` prints each distinct plan once with the hosts it covers (a 10,000-host fleet is a page, not
10,000 tables); `--json` still has one entry per host and model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vllmctl import cli
from vllmctl.planner.plan_groups import hosts_label

REPO = Path(__file__).resolve().parents[3]


def test_hosts_with_the_same_plan_share_one_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(REPO / "inventories/mixed-fleet.yml"), "--offline"]) == 0
    out = capsys.readouterr().out
    headers = [found[1] for line in out.splitlines() if (found := re.match(r"(\S.* / [\w-]+): ", line))]
    assert headers == [
        "h100-01, h100-02 / llama-70b",
        "l40s-01, l40s-02, l40s-03 / qwen-7b-chat",
        "a100-01, a100-02 / qwen-32b",
    ]
    assert out.count("  replica 0: ") == 3  # one section per distinct plan


def test_a_host_whose_gpus_differ_gets_its_own_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inv.yml"
    hosts = "".join(
        f"  g{i}: {{address: 10.0.0.{i + 1}, gpus: {{model: H100-80GB, count: 8}}}}\n" for i in range(5)
    )
    inventory.write_text(
        "vllmctl: 1\nhosts:\n" + hosts + "  odd: {address: 10.0.0.9, gpus: {model: L40S, count: 4}}\n"
        "models:\n  llama:\n    source: meta-llama/Llama-3.1-8B-Instruct\n"
        "    hosts: [g0, g1, g2, odd, g3, g4]\n"
    )
    assert cli.main(["plan", str(inventory), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "g0, g1, …, g4 (5 hosts) / llama: 8x H100-80GB" in out
    assert "\nodd / llama: 4x L40S" in out
    assert cli.main(["plan", str(inventory), "--offline", "--json"]) == 0
    assert '"host": "g3"' in capsys.readouterr().out  # JSON keeps every host


def test_hosts_label_lists_up_to_three_then_counts() -> None:
    assert hosts_label(["a"]) == "a"
    assert hosts_label(["a", "b", "c"]) == "a, b, c"
    assert hosts_label([f"h{i}" for i in range(1200)]) == "h0, h1, …, h1199 (1,200 hosts)"
