"""File-level and YAML-level problems: missing, empty, binary, invalid YAML, duplicates, alias bombs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory


def only_problem(path: str) -> str:
    with pytest.raises(InvalidInputError) as caught:
        load_inventory(path)
    assert len(caught.value.problems) == 1
    assert caught.value.exit_code == 2
    return caught.value.problems[0].render()


def test_missing_file(workdir: Path) -> None:
    assert only_problem("nope.yml") == (
        "nope.yml: file not found\n  hint: check the path; relative paths are read from the current directory"
    )


def test_directory(workdir: Path) -> None:
    (workdir / "dir").mkdir()
    assert only_problem("dir").startswith("dir: is a directory, not a file\n")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n\n# another\n", "   \n"])
def test_empty_file(workdir: Path, text: str) -> None:
    (workdir / "inv.yml").write_text(text)
    assert only_problem("inv.yml") == (
        "inv.yml: file is empty\n  hint: an inventory needs at least `vllmctl: 1` and `hosts:`"
    )


def test_binary_file(workdir: Path) -> None:
    (workdir / "inv.yml").write_bytes(b"\x7fELF\x02\x01\x00\x00binary")
    assert only_problem("inv.yml").startswith("inv.yml: file is binary (contains NUL bytes)\n")


def test_non_utf8_reports_line_and_column(workdir: Path) -> None:
    (workdir / "inv.yml").write_bytes("vllmctl: 1\nhosts:\n  caf\xe9: {}\n".encode("latin-1"))
    assert (
        only_problem("inv.yml") == "inv.yml:3:6: file is not valid UTF-8 text\n  hint: save the file as UTF-8"
    )


def test_utf8_bom_is_accepted(workdir: Path) -> None:
    (workdir / "inv.yml").write_bytes(b"\xef\xbb\xbfvllmctl: 1\nhosts:\n  a: {address: 10.0.0.1}\n")
    assert list(load_inventory("inv.yml").hosts) == ["a"]


def test_invalid_yaml_gives_pyyaml_position(workdir: Path) -> None:
    (workdir / "inv.yml").write_text("vllmctl: 1\nhosts: [a\nmodels: {}\n")
    assert only_problem("inv.yml") == (
        "inv.yml:3:7: invalid YAML: expected ',' or ']', but got ':'\n"
        "  hint: check indentation and quoting around this spot"
    )


def test_ini_text_in_a_yml_file_gets_a_hint_to_name_it_as_ini(workdir: Path) -> None:
    (workdir / "hosts.yml").write_text("[gpu]\ngpu-01 ansible_host=10.0.0.1\n")
    assert only_problem("hosts.yml").endswith(
        "hint: an Ansible INI inventory is read from a file not named .yml, .yaml or .json (e.g. hosts.ini)"
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- a\n- b\n", "a list"), ("just words\n", "a single value"), ("42\n", "a single value")],
)
def test_top_level_not_a_mapping(workdir: Path, text: str, kind: str) -> None:
    (workdir / "inv.yml").write_text(text)
    assert only_problem("inv.yml") == (
        f"inv.yml:1:1: top level is {kind}, not a mapping\n  hint: start with `vllmctl: 1` then `hosts:`"
    )


def test_duplicate_keys_are_all_reported_with_the_rest(problems: Callable[..., list[str]]) -> None:
    found = problems(
        """\
        vllmctl: 1
        hosts:
          gpu-01: {address: 10.0.0.1}
          gpu-01: {address: 10.0.0.2}
        models: {}
        models: {}
        defaults: {ssh: {prot: 22}}
        """
    )
    assert found == [
        "inv.yml:4:3: hosts.gpu-01: duplicate key 'gpu-01' (first defined at line 3)\n"
        "  hint: YAML keeps only the last one; remove or rename one of them",
        "inv.yml:6:1: models: duplicate key 'models' (first defined at line 5)\n"
        "  hint: YAML keeps only the last one; remove or rename one of them",
        "inv.yml:7:18: defaults.ssh.prot: unknown key 'prot'\n  hint: did you mean 'port'?",
    ]


def test_billion_laughs_is_rejected_quickly(workdir: Path) -> None:
    lines = ["vllmctl: 1", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        refs = ",".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    (workdir / "inv.yml").write_text("\n".join(lines) + "\n")
    started = time.monotonic()
    message = only_problem("inv.yml")
    assert time.monotonic() - started < 10  # expanded, it would take minutes and gigabytes
    # named where the expansion crosses the limit: the eighth *a3 of a4, on line 6
    assert message == (
        "inv.yml:6:38: a4[7]: YAML expands to more than 100000 values at alias *a3 (aliases that multiply, "
        "a 'billion laughs' file?)\n"
        "  hint: use fewer nested aliases (*name); write the repeated parts out or use `defaults:`"
    )


def test_self_referencing_alias(problems: Callable[..., list[str]]) -> None:
    found = problems("vllmctl: 1\nhosts: {a: {}}\ndefaults: &d {vars: {x: *d}}\n")
    assert found[0] == "inv.yml:3:11: defaults.vars.x: an alias refers to the value that contains it"


def test_deep_nesting_is_an_error_not_a_crash(workdir: Path) -> None:
    (workdir / "inv.yml").write_text("vllmctl: 1\nx: " + "[" * 3000 + "]" * 3000 + "\n")
    assert "nested" in only_problem("inv.yml")


def test_merge_keys_and_aliases_work(workdir: Path) -> None:
    (workdir / "inv.yml").write_text(
        "vllmctl: 1\n"
        "hosts:\n"
        "  a: &base {address: 10.0.0.1, gpus: {model: L40S, count: 2}}\n"
        "  b: {<<: *base, address: 10.0.0.2}\n"
    )
    inventory = load_inventory("inv.yml")
    assert inventory.hosts["b"].address == "10.0.0.2"
    assert inventory.hosts["b"].gpus is not None and inventory.hosts["b"].gpus.count == 2
