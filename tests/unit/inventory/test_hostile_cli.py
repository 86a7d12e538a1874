"""Issue #17 end to end: `vllmctl validate` in its own process refuses hostile inventories with exit 2,
FILE:LINE:COL, the field, a hint and no traceback, and never writes an unprintable character to the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HOST = "vllmctl: 1\nhosts:\n  a: {address: 10.0.0.1}\n"
CASES = {
    "smuggled-flag": (
        HOST + "models:\n  m: {source: org/m, hosts: a, engine_args: {revision: --trust-remote-code}}\n",
        "error: inv.yml:5:56: models.m.engine_args.revision: starts with '-', so the engine would read it as "
        "another flag, got '--trust-remote-code'\n  hint: vllm flag --revision\n",
    ),
    "proxy-command-address": (
        "vllmctl: 1\nhosts:\n  a: {address: -oProxyCommand=touch/tmp/x}\n",
        "error: inv.yml:3:16: hosts.a.address: address '-oProxyCommand=touch/tmp/x' starts with '-': "
        "ssh would "
        "read it as an option\n  hint: an address is a DNS name (letters, digits, '-', '_' and '.'), an IPv4 "
        "address, or an IPv6 address (bare or in [brackets])\n",
    ),
    "bidi-in-a-key": (
        HOST + 'defaults: {vars: {"evil\u202eyek": 1}}\n',
        "error: inv.yml:4:19: defaults.vars.evil\\u202eyek: key contains a control character (U+202E "
        "right-to-left override)\n  hint: remove it\n",
    ),
    "port-as-float": (
        HOST + "models:\n  m: {source: org/m, hosts: a, port: 8000.0}\n",
        "error: inv.yml:5:38: models.m.port: expected an integer, got number 8000.0\n"
        "  hint: write it as a whole number: 8000, not 8000.0\n",
    ),
}


@pytest.fixture
def validate(workdir: Path, controller_home: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs `vllmctl validate inv.yml` with a HOME whose ~/.ssh/known_hosts exists."""

    def run(text: str, *flags: str) -> subprocess.CompletedProcess[str]:
        (workdir / "inv.yml").write_text(text, encoding="utf-8")
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        argv = [sys.executable, "-m", "vllmctl", "validate", "inv.yml", *flags]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)

    return run


@pytest.mark.parametrize(("text", "expected"), CASES.values(), ids=CASES.keys())
def test_validate_refuses_with_location_field_and_hint(
    validate: Callable[..., subprocess.CompletedProcess[str]], text: str, expected: str
) -> None:
    result = validate(text)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == expected + "inv.yml: 1 problem found\n"
    unprintable = [c for c in result.stderr if (ord(c) < 32 and c != "\n") or 0x202A <= ord(c) <= 0x202E]
    assert unprintable == []


def test_json_output_carries_the_same_problem(
    validate: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    text, _ = CASES["smuggled-flag"]
    payload = json.loads(validate(text, "--json").stdout)
    assert payload["ok"] is False
    [problem] = payload["problems"]
    assert (problem["line"], problem["column"], problem["path"]) == (5, 56, "models.m.engine_args.revision")
