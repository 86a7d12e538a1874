"""`vllmctl bench` end to end against a real local streaming server: tables, --json, SLOs, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmctl.cli import main

INVENTORY = """\
vllmctl: 1
hosts:
  box-1: {{address: 127.0.0.1, gpus: {{model: H100-80GB, count: 1}}}}
  box-2: {{address: 127.0.0.1, ssh: {{port: 2222}}, gpus: {{model: H100-80GB, count: 1}}}}
models:
  tiny:
    source: {source}
    hosts: [box-1, box-2]
    port: {port}
    slo: {{ttft_p99_ms: {ttft}, max_error_rate: 0}}
"""


@pytest.fixture(autouse=True)
def _plain_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "160")


def _inventory(tmp_path: Path, base_url: str, ttft: float = 60000, source: str = "org/tiny") -> str:
    path = tmp_path / "fleet.yml"
    port = int(base_url.rsplit(":", 1)[1])
    path.write_text(INVENTORY.format(port=port, ttft=ttft, source=source))
    return str(path)


def _bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["bench", "--concurrency", "1,2", "--requests", "3", "--output-tokens", "4", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_url_mode_prints_json_with_every_level(fake_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _bench(capsys, "--url", fake_server.base_url, "--model-id", "tiny", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["ok"] is True
    (endpoint,) = payload["endpoints"]
    assert (endpoint["model_id"], endpoint["prompts"], endpoint["violations"]) == ("tiny", "word-list", [])
    levels = endpoint["levels"]
    assert [(lv["concurrency"], lv["completed"], lv["total_output_tokens"]) for lv in levels] == [
        (1, 3, 12),
        (2, 3, 12),
    ]
    assert levels[0]["ttft"]["p50_ms"] > 0 and levels[0]["error_rate"] == 0.0
    assert "tiny: concurrency 2: 3/3 ok" in err and endpoint["host"] == ""


def test_inventory_mode_benchmarks_each_host_and_honours_limit(
    fake_server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = _inventory(tmp_path, fake_server.base_url)
    code, out, _ = _bench(capsys, inventory)
    assert code == 0
    assert "box-1/tiny" in out and "box-2/tiny" in out
    assert "TTFT ms p50/p99" in out and "3/3" in out
    code, out, _ = _bench(capsys, inventory, "--limit", "box-2", "--json")
    assert [e["host"] for e in json.loads(out)["endpoints"]] == ["box-2"]


def test_a_local_model_directory_gives_exact_prompts_from_its_tokenizer(
    fake_server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    model = ensure_tiny_model(tmp_path / "models")
    inventory = _inventory(tmp_path, fake_server.base_url, source=str(model))
    code, out, _ = _bench(capsys, inventory, "--limit", "box-1", "--json")
    assert code == 0
    assert json.loads(out)["endpoints"][0]["prompts"] == "tokenizer"


def test_a_broken_slo_is_reported_with_figures_and_exits_1(
    fake_server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = _inventory(tmp_path, fake_server.base_url, ttft=0.0001)
    code, _, err = _bench(capsys, inventory, "--limit", "box-1")
    assert code == 1
    assert "box-1/tiny: SLO broken: ttft_p99_ms: measured" in err and "SLO at most 0.0001" in err
    code, out, _ = _bench(
        capsys,
        "--url",
        fake_server.base_url,
        "--model-id",
        "tiny",
        "--slo",
        "min_output_tokens_per_s=1e9",
        "--json",
    )
    assert code == 1
    (violation,) = json.loads(out)["endpoints"][0]["violations"][:1]
    assert violation["key"] == "min_output_tokens_per_s" and violation["measured"] > 0


def test_an_unreachable_endpoint_is_a_failure_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _bench(capsys, "--url", "http://127.0.0.1:9", "--model-id", "tiny")
    assert code == 1
    assert (
        "warm-up request failed: ClientConnectorError: Cannot connect to host 127.0.0.1:9" in err
        and "Traceback" not in err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give an inventory, or --url with --model-id"),
        (["--url", "http://x:1"], "--url needs --model-id"),
        (["--url", "http://x:1", "--model-id", "m", "--concurrency", "0,4"], "--concurrency '0,4'"),
        (["--url", "http://x:1", "--model-id", "m", "--slo", "p99=3"], "--slo 'p99=3': expected KEY=NUMBER"),
        (["--url", "http://x:1", "--model-id", "m", "--requests", "0"], "--requests must be at least 1"),
        (["--url", "http://x:1", "--model-id", "m", "--tokenizer", "/nonexistent"], "no tokenizer.json"),
    ],
)
def test_usage_errors_exit_2_with_a_hint(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["bench", *argv])
    _, err = capsys.readouterr()
    assert code == 2
    assert message in err and "hint:" in err


def test_an_unknown_model_names_the_known_ones(
    fake_server: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = _bench(capsys, _inventory(tmp_path, fake_server.base_url), "--model", "llama")
    assert code == 2
    assert "--model: no model named 'llama'" in err and "known: tiny" in err
