"""Every fact parser, the provisioning ones included, against its recorded cases:
tests/unit/facts/<fact>/<case>.json = {args?, command, output, exit_code, fact}."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllmctl.facts import FACTS
from vllmctl.facts.script import build_script, one_write, parse_sections, split_sections

CASES = sorted(Path(__file__).parent.glob("*/*.json"))


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.stem}" for c in CASES])
def test_fact_case(case: Path) -> None:
    doc = json.loads(case.read_text())
    fact = FACTS[case.parent.name]
    args = tuple(doc.get("args", ()))
    assert fact.command(args) == doc["command"]
    assert fact.parse(doc["output"], doc["exit_code"]) == doc["fact"]


def test_every_fact_has_cases() -> None:
    assert {c.parent.name for c in CASES} == set(FACTS)


def test_one_script_round_trip_splits_back_into_each_fact() -> None:
    requests = {"python": (), "kernel": (), "paths": ("/etc/a b",), "users": ()}
    script = build_script(requests)
    assert "users" not in script  # a fact needing arguments with none asked for is not run
    assert "'/etc/a b'" in script
    output = (
        "@@vllmctl-section python\nPython 3.11.2\n@@vllmctl-exit 0\n"
        "@@vllmctl-section kernel\nLinux 6.1.0 x86_64\n@@vllmctl-exit 0\n"
        "@@vllmctl-section paths\n/etc/a b\tabsent\n@@vllmctl-exit 0\n"
    )
    assert parse_sections(requests, output) == {
        "python": "3.11.2",
        "kernel": {"name": "Linux", "release": "6.1.0", "machine": "x86_64"},
        "paths": {"/etc/a b": {"type": "absent"}},
        "users": {},
    }


def test_a_cut_short_script_leaves_the_missing_facts_out() -> None:
    output = "@@vllmctl-section python\nPython 3.11.2\n@@vllmctl-exit 0\n@@vllmctl-section kernel\nLinux"
    assert split_sections(output) == {"python": ("Python 3.11.2\n", 0)}
    assert parse_sections({"python": (), "kernel": ()}, output) == {"python": "3.11.2"}


def test_section_exit_code_reaches_the_parser() -> None:
    output = "@@vllmctl-section gpus\n"
    output += "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    output += "@@vllmctl-exit 9\n"
    assert parse_sections({"gpus": ()}, output)["gpus"]["status"] == "no-driver"


def test_the_paths_and_applied_scripts_run_in_a_real_posix_shell(tmp_path: Path) -> None:
    import hashlib
    import subprocess

    (tmp_path / "a b.txt").write_text("hello\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a b.txt")
    (tmp_path / "u.service.applied").write_text("h1\n")
    paths = (str(tmp_path / "a b.txt"), str(tmp_path / "dir"), str(tmp_path / "none"), str(tmp_path / "link"))
    script = build_script({"paths": paths, "applied": ()}).replace("/var/lib/vllmctl/state", str(tmp_path))
    output = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    facts = parse_sections({"paths": paths, "applied": ()}, output)
    found = facts["paths"]
    assert found[paths[0]]["type"] == "file"
    assert found[paths[0]]["sha256"] == hashlib.sha256(b"hello\n").hexdigest()
    assert found[paths[1]]["type"] == "directory" and found[paths[1]]["sha256"] is None
    assert found[paths[2]] == {"type": "absent"}
    assert found[paths[3]]["type"] == "other"
    assert facts["applied"] == {"u.service": "h1"}


def _sh(script: str) -> tuple[int, str]:
    import subprocess

    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout


def test_one_write_prints_the_same_facts_and_keeps_the_exit_status(tmp_path: Path) -> None:
    (tmp_path / "u.service.applied").write_text("h1\n")
    requests = {"paths": (str(tmp_path / "u.service.applied"), str(tmp_path / "none")), "applied": ()}
    script = build_script(requests).replace("/var/lib/vllmctl/state", str(tmp_path))
    (plain_code, plain), (code, once) = _sh(script), _sh(one_write(script))
    assert code == plain_code == 0 and once == plain
    assert parse_sections(requests, once)["applied"] == {"u.service": "h1"}
    assert _sh(one_write("echo held; exit 75")) == (75, "held\n")  # the lock probe's refusal survives
    assert _sh(one_write("(echo a)")) == (0, "a\n")  # a script opening with `(` is not `$((` arithmetic


def test_one_write_sends_nothing_until_the_script_is_done() -> None:
    import subprocess

    script = "echo first; sleep 0.3; echo second"
    for wrapped, first_read in ((script, b"first\n"), (one_write(script), b"first\nsecond\n")):
        proc = subprocess.Popen(["sh", "-c", wrapped], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert os.read(proc.stdout.fileno(), 4096) == first_read
        proc.wait()
        proc.stdout.close()
