"""Every operation, the provisioning ones included, against its recorded cases:
tests/unit/ops/<op>/<case>.json = {args, facts, commands, noop, warnings?}."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllmctl.ops import OPERATIONS, OpError, Upload

CASES = sorted(Path(__file__).parent.glob("*/*.json"))


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.stem}" for c in CASES])
def test_op_case(case: Path) -> None:
    doc = json.loads(case.read_text())
    step = OPERATIONS[case.parent.name](doc["args"], doc["facts"])
    assert step.rendered() == doc["commands"]
    assert step.noop == doc["noop"]
    assert list(step.warnings) == doc.get("warnings", [])
    assert (step.noop is None) == step.changed


def test_every_operation_has_cases() -> None:
    assert {c.parent.name for c in CASES} == set(OPERATIONS)


def test_every_operation_asks_for_the_facts_its_cases_use() -> None:
    for case in CASES:
        doc = json.loads(case.read_text())
        asked = OPERATIONS[case.parent.name].requests(doc["args"])
        assert set(asked) <= set(doc["facts"]) | {"python"}, case


def test_secret_values_travel_only_in_the_upload_body() -> None:
    args = {"path": "/etc/vllmctl/m.env", "content": 'HF_TOKEN="hf_topsecret"\n'}
    step = OPERATIONS["env_file"](args, {"paths": {}})
    (upload,) = step.actions
    assert isinstance(upload, Upload) and upload.secret and upload.mode == "0600"
    assert "hf_topsecret" in upload.content
    assert not any("hf_topsecret" in line for line in step.rendered())


def test_a_file_where_a_directory_belongs_is_refused_with_a_hint() -> None:
    with pytest.raises(OpError) as caught:
        OPERATIONS["directory"]({"path": "/etc/vllmctl"}, {"paths": {"/etc/vllmctl": {"type": "file"}}})
    assert "not a directory" in caught.value.message and "mv /etc/vllmctl" in caught.value.hint


def test_a_directory_where_a_file_belongs_is_refused() -> None:
    with pytest.raises(OpError, match="not a file"):
        OPERATIONS["file"]({"path": "/etc/x", "content": ""}, {"paths": {"/etc/x": {"type": "directory"}}})


def test_the_applied_hash_is_recorded_only_after_the_restart() -> None:
    step = OPERATIONS["service"]({"name": "u.service", "applied": "h2"}, {"units": {}, "applied": {}})
    kinds = [type(a).__name__ + ":" + a.render().split()[1] for a in step.actions]
    assert kinds == [
        "Command:enable",
        "Command:022",  # umask 022 && mkdir -p -- the helper's folder
        "Upload:/var/lib/vllmctl/bin/engine-gone.py",
        "Command:/var/lib/vllmctl/bin/engine-gone.py",
        "Command:start",
        "Upload:/var/lib/vllmctl/state/u.service.applied",
    ]
    assert step.actions[-1].content == "h2"  # type: ignore[union-attr]


def test_venv_with_the_wrong_python_is_refused() -> None:
    facts = {"paths": {}, "engine_venvs": {}, "python": "3.11.2"}
    with pytest.raises(OpError, match=r"needs Python 3\.12"):
        OPERATIONS["python_venv"]({"path": "/opt/v", "python_version": "3.12"}, facts)
