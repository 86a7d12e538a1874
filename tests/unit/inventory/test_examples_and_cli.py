"""The example inventories validate; `vllmctl validate` prints, exits and emits JSON as documented."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllmctl.cli import main
from vllmctl.inventory import inventory_schema, load_inventory

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = {
    "inventories/single-host.yml": (1, 0, 1),
    "inventories/mixed-fleet.yml": (7, 4, 3),
    "inventories/ansible-hosts.yml": (4, 3, 1),
    "inventories/ansible/hosts.yml": (4, 2, 0),
}


@pytest.mark.parametrize(("path", "counts"), EXAMPLES.items())
def test_examples_validate(
    path: str, counts: tuple[int, int, int], controller_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(ROOT / path)]) == 0
    hosts, groups, models = counts
    assert capsys.readouterr().out == f"{ROOT / path}: ok ({hosts} hosts, {groups} groups, {models} models)\n"


def test_mixed_fleet_content() -> None:
    inventory = load_inventory(ROOT / "inventories/mixed-fleet.yml")
    assert {host.gpus.model for host in inventory.hosts.values() if host.gpus} == {
        "H100-80GB",
        "L40S",
        "A100-80GB",
    }
    qwen = inventory.models["qwen-32b"]
    assert qwen.hosts == ("a100-01", "a100-02")
    assert inventory.hosts["a100-01"].engine.name == "sglang"
    assert inventory.hosts["l40s-03"].ssh.port == 2222
    assert inventory.hosts["l40s-03"].ssh.user == "ops"
    assert inventory.models["llama-70b"].engine_args["api_key"] == {"secret": "serving_key"}
    assert inventory.groups["vllm-fleet"] == ("h100-01", "h100-02", "l40s-01", "l40s-02", "l40s-03")


def test_validate_reports_problems_on_stderr(
    workdir: Path, controller_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "inv.yml").write_text("vllmctl: 1\nhosts:\n  a: {adress: x}\n")
    assert main(["validate", "inv.yml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: inv.yml:3:7: hosts.a.adress: unknown key 'adress'\n"
        "  hint: did you mean 'address'?\n"
        "inv.yml: 1 problem found\n"
    )


def test_validate_json(workdir: Path, controller_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "inv.yml").write_text("vllmctl: 1\nhosts:\n  a: {ssh: {port: 0}}\n")
    assert main(["validate", "inv.yml", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload == {
        "ok": False,
        "problems": [
            {
                "file": "inv.yml",
                "line": 3,
                "column": 19,
                "path": "hosts.a.ssh.port",
                "message": "must be >= 1, got integer 0",
                "hint": "SSH port (1–65535).",
            }
        ],
        "summary": {"file": "inv.yml", "problems": 1},
    }
    (workdir / "ok.yml").write_text("vllmctl: 1\nhosts:\n  a: {}\n")
    assert main(["validate", "ok.yml", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "ok": True,
        "problems": [],
        "summary": {"file": "ok.yml", "hosts": 1, "groups": 0, "models": 0},
    }


def test_validate_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--schema"]) == 0
    assert json.loads(capsys.readouterr().out) == inventory_schema()


def test_validate_without_inventory_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 2
    assert "no inventory given" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content",
    [b"\x00\x01\x02", b"vllmctl: 1\nhosts: [\n", b"a: &a [*a, *a]\n", b"vllmctl: 1\nmodels: {m: 3}\n"],
)
def test_cli_process_never_shows_a_traceback(workdir: Path, content: bytes) -> None:
    (workdir / "inv.yml").write_bytes(content)
    result = subprocess.run(
        [sys.executable, "-m", "vllmctl", "validate", "inv.yml"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("error: inv.yml")


def test_the_readme_validate_line_passes_on_a_fresh_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the README shows it, from the repository root, with a HOME holding no key, known_hosts or secret."""
    lines = [
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("$ vllmctl validate")
    ]
    (line,) = lines
    argv = line.split("#", 1)[0].split()[2:]  # after `$ vllmctl`
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)
    assert argv[0] == "validate"
    assert main(argv) == 0, capsys.readouterr().err
    assert main(["validate", "inventories/mixed-fleet.yml"]) == 2  # the controller checks need those files
    assert "identity_file ~/.ssh/fleet_ed25519 does not exist" in capsys.readouterr().err
