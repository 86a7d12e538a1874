"""Property: any mutation of a valid inventory gives an Inventory or an InvalidInputError, nothing else."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllmctl.cli import main
from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory

ROOT = Path(__file__).resolve().parents[3]
SEEDS = [
    (ROOT / name).read_text(encoding="utf-8")
    for name in (
        "inventories/single-host.yml",
        "inventories/mixed-fleet.yml",
        "inventories/ansible/hosts.yml",
    )
]
FUZZ = settings(
    max_examples=int(os.environ.get("VLLMCTL_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["vllm", "sglang", "h100", "gpu-01", "hf_" + "x" * 34, "\x1b[2J", "a\nb", "0.10", "~"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def containers(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        found += containers(child, (*path, key)) if isinstance(child, dict | list) else []
    return found


def at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def mutate(data: dict[str, Any], draw: st.DataObject) -> dict[str, Any]:
    data = copy.deepcopy(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        target = at(data, draw.draw(st.sampled_from(containers(data))))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        action = draw.draw(st.sampled_from(["delete", "replace", "insert"]))
        if action == "insert" or not keys:
            if isinstance(target, dict):
                target[draw.draw(st.text(max_size=12))] = draw.draw(values)
            else:
                target.append(draw.draw(values))
        elif action == "delete":
            del target[draw.draw(st.sampled_from(keys))]
        else:
            target[draw.draw(st.sampled_from(keys))] = draw.draw(values)
    return data


def check(path: Path) -> None:
    try:
        result = load_inventory(path)
    except InvalidInputError as exc:
        assert exc.problems and exc.exit_code == 2
        for problem in exc.problems:
            assert problem.render().startswith(
                str(path.parent) if problem.location.file != str(path) else str(path)
            )
    else:
        assert isinstance(result, Inventory)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fuzz")
    (directory / "ansible").mkdir()
    (directory / "ansible" / "hosts.yml").write_text(SEEDS[2])
    return directory


@FUZZ
@given(seed=st.sampled_from(SEEDS), draw=st.data())
def test_structural_mutations(scratch: Path, seed: str, draw: st.DataObject) -> None:
    path = scratch / "inv.yml"
    path.write_text(yaml.safe_dump(mutate(yaml.safe_load(seed), draw), allow_unicode=True))
    check(path)


@FUZZ
@given(seed=st.sampled_from(SEEDS), cut=st.floats(0, 1), junk=st.binary(max_size=16), where=st.floats(0, 1))
def test_text_mutations(scratch: Path, seed: str, cut: float, junk: bytes, where: float) -> None:
    raw = seed.encode()[: int(len(seed) * cut)]
    position = int(len(raw) * where)
    path = scratch / "inv.yml"
    path.write_bytes(raw[:position] + junk + raw[position:])
    check(path)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(SEEDS[:2]), draw=st.data())
def test_cli_on_mutations_has_no_traceback(
    scratch: Path, seed: str, draw: st.DataObject, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scratch / "cli.yml"
    data = mutate(yaml.safe_load(seed), draw)
    data["hosts"] = {"bad host": 1}  # always invalid, whatever else the mutation did
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    assert captured.err.startswith("error: ")


INI_SEED = (ROOT / "tests" / "fixtures" / "ansible" / "deepops" / "inventory").read_text(encoding="utf-8")
INI_PIECES = ["[", "]", ":children", ":vars", "=", "'", '"', "[01:x]", "[a:c]", ":99999", "$ANSIBLE_VAULT",
              "-o ProxyCommand=", "\t", "#", ";", "\n", "\x00", "é", "{", "}", "gpu[1:", " "]  # fmt: skip


@FUZZ
@given(
    cuts=st.lists(
        st.tuples(st.integers(0, len(INI_SEED)), st.integers(0, 12), st.sampled_from(INI_PIECES)), max_size=4
    )
)
def test_a_mutated_ini_inventory_gives_an_inventory_or_input_errors(workdir: Path, cuts: list[Any]) -> None:
    """Ansible's own parser, then vllmctl's mapping and checks: never a traceback, whatever the INI says."""
    pytest.importorskip("ansible")
    text = INI_SEED
    for start, length, piece in cuts:
        text = text[:start] + piece + text[start + length :]
    (workdir / "hosts.ini").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        assert isinstance(load_inventory("hosts.ini"), Inventory)
    except InvalidInputError as exc:
        assert exc.problems and all(problem.location.file == "hosts.ini" for problem in exc.problems)
