"""Issue #17, controller-side hygiene: `validate` checks the keys, known_hosts, secret files and local
model folders an inventory names on this machine, with the exact chmod / ssh-keyscan fix in the hint.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vllmctl.cli import main
from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.controller import LocalFiles


def write(path: Path, mode: int, text: str = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """A private key and a known_hosts with the modes ssh wants."""
    write(tmp_path / "keys" / "id", 0o600)
    write(tmp_path / "keys" / "known", 0o644)
    return tmp_path / "keys"


def inventory(keys: Path, extra: str = "", ssh: str = "") -> str:
    return (
        "vllmctl: 1\n"
        f"defaults: {{ssh: {{identity_file: {keys}/id, known_hosts: {keys}/known{ssh}}}}}\n"
        "hosts:\n  a: {address: 10.0.0.1}\n  b: {address: 10.0.0.2}\n" + extra
    )


def at(text: str, line: int, needle: str) -> str:
    """`inv.yml:LINE:COL` of the first `needle` on a (1-based) line of `text`."""
    return f"inv.yml:{line}:{text.splitlines()[line - 1].index(needle) + 1}"


def problems(workdir: Path, text: str) -> list[str]:
    (workdir / "inv.yml").write_text(text)
    with pytest.raises(InvalidInputError) as caught:
        load_inventory("inv.yml", LocalFiles())
    return [problem.render() for problem in caught.value.problems]


def test_files_with_the_right_modes_pass(workdir: Path, keys: Path) -> None:
    write(workdir / "secret", 0o600)
    (workdir / "models" / "m").mkdir(parents=True)
    text = inventory(keys, f"models: {{m: {{source: {workdir}/models/m, hosts: a}}}}\n")
    (workdir / "inv.yml").write_text(text + f"secrets: {{t: {{file: {workdir}/secret}}}}\n")
    assert load_inventory("inv.yml", LocalFiles()).models["m"].source == f"{workdir}/models/m"


def test_an_identity_file_others_can_read_is_refused(workdir: Path, keys: Path) -> None:
    (keys / "id").chmod(0o644)
    assert problems(workdir, inventory(keys)) == [
        "inv.yml:2:33: defaults.ssh.identity_file: identity_file "
        f"{keys}/id is open to other users "
        f"(mode 0644); OpenSSH refuses such a key\n  hint: chmod 600 {keys}/id"
    ]


def test_a_missing_identity_file_is_refused(workdir: Path, keys: Path) -> None:
    (keys / "id").unlink()
    found = problems(workdir, inventory(keys))
    assert found == [
        f"inv.yml:2:33: defaults.ssh.identity_file: identity_file {keys}/id does not exist\n"
        f"  hint: create it with `ssh-keygen -t ed25519 -f {keys}/id`, or fix the path"
    ]


def test_a_missing_known_hosts_names_the_keyscan_for_every_host_using_it(workdir: Path, keys: Path) -> None:
    (keys / "known").unlink()
    text = inventory(keys) + "  c: {address: '[2001:db8::1]', ssh: {port: 2222}}\n"
    assert problems(workdir, text) == [
        f"{at(text, 2, f'{keys}/known')}: defaults.ssh.known_hosts: known_hosts {keys}/known does not exist\n"
        f"  hint: ssh-keyscan -p 22 10.0.0.1 10.0.0.2 >> {keys}/known; "
        f"ssh-keyscan -p 2222 2001:db8::1 >> {keys}/known, then check the fingerprints with each host's owner"
    ]


def test_a_missing_known_hosts_is_fine_when_keys_are_recorded_on_first_use(workdir: Path, keys: Path) -> None:
    (keys / "known").unlink()
    (workdir / "inv.yml").write_text(inventory(keys, ssh=", strict_host_keys: false"))
    assert load_inventory("inv.yml", LocalFiles()).hosts["a"].ssh.strict_host_keys is False


def test_a_known_hosts_anyone_can_write_is_refused(workdir: Path, keys: Path) -> None:
    (keys / "known").chmod(0o666)
    text = inventory(keys)
    assert problems(workdir, text) == [
        f"{at(text, 2, f'{keys}/known')}: defaults.ssh.known_hosts: known_hosts {keys}/known is writable by "
        "anyone (mode 0666)\n"
        f"  hint: chmod 644 {keys}/known"
    ]


@pytest.mark.parametrize("mode", [0o644, 0o602])
def test_a_secret_file_anyone_can_read_or_write_is_refused(workdir: Path, keys: Path, mode: int) -> None:
    secret = write(workdir / "my secret", mode)
    found = problems(workdir, inventory(keys, f"secrets: {{t: {{file: '{secret}'}}}}\n"))
    assert found == [
        f"inv.yml:6:21: secrets.t.file: secret file {secret} is readable or writable by anyone "
        f"(mode {mode:04o})\n  hint: chmod 600 '{secret}'"
    ]


def test_a_missing_secret_file_is_refused(workdir: Path, keys: Path) -> None:
    found = problems(workdir, inventory(keys, f"secrets: {{t: {{file: {workdir}/nope}}}}\n"))
    assert found == [
        f"inv.yml:6:21: secrets.t.file: secret file {workdir}/nope does not exist\n"
        "  hint: create it (mode 600), or fix the path"
    ]


def model(keys: Path, source: Path) -> str:
    return inventory(keys, f"models: {{m: {{source: '{source}', hosts: a}}}}\n")


def test_a_world_writable_model_folder_is_refused(workdir: Path, keys: Path) -> None:
    folder = workdir / "models" / "m"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert problems(workdir, model(keys, folder)) == [
        f"inv.yml:6:22: models.m.source: {folder} can be changed by other users on the controller: "
        f"{folder} is world-writable\n  hint: chmod o-w {folder}"
    ]


def test_a_model_folder_inside_a_world_writable_folder_is_refused(workdir: Path, keys: Path) -> None:
    (workdir / "shared" / "m").mkdir(parents=True)
    (workdir / "shared").chmod(0o777)
    found = problems(workdir, model(keys, workdir / "shared" / "m"))
    assert len(found) == 1 and f"{workdir}/shared is world-writable" in found[0]


def test_a_sticky_folder_protects_only_entries_owned_by_us_or_root(workdir: Path, keys: Path) -> None:
    sticky = workdir / "tmp"
    (sticky / "ours" / "m").mkdir(parents=True)
    (sticky / "theirs" / "m").mkdir(parents=True)
    sticky.chmod(0o1777)
    (workdir / "inv.yml").write_text(model(keys, sticky / "ours" / "m"))
    load_inventory("inv.yml", LocalFiles())
    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    os.chown(sticky / "theirs", 65534, 65534)
    found = problems(workdir, model(keys, sticky / "theirs" / "m"))
    assert len(found) == 1
    assert f"{sticky}/theirs belongs to another user, inside the world-writable {sticky}" in found[0]


def test_a_model_folder_that_resolves_into_a_system_directory_is_refused(workdir: Path, keys: Path) -> None:
    (workdir / "models").mkdir()
    (workdir / "models" / "m").symlink_to("/etc")
    found = problems(workdir, model(keys, workdir / "models" / "m"))
    assert found == [
        f"inv.yml:6:22: models.m.source: {workdir}/models/m resolves to /etc: /etc is inside the system "
        "directory /etc\n  hint: point it at the model folder itself"
    ]


def test_an_imported_key_is_reported_in_the_ansible_file(workdir: Path, keys: Path) -> None:
    (keys / "id").chmod(0o640)
    (workdir / "hosts.yml").write_text(
        f"all:\n  hosts:\n    g1: {{ansible_ssh_private_key_file: {keys}/id}}\n"
    )
    text = f"vllmctl: 1\nansible_inventory: hosts.yml\ndefaults: {{ssh: {{known_hosts: {keys}/known}}}}\n"
    assert problems(workdir, text) == [
        "hosts.yml:3:40: all.hosts.g1.ansible_ssh_private_key_file: "
        f"identity_file {keys}/id is open to other "
        f"users (mode 0640); OpenSSH refuses such a key\n  hint: chmod 600 {keys}/id"
    ]


def test_validate_checks_the_controller_unless_told_not_to(
    workdir: Path, keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (keys / "id").chmod(0o604)
    (workdir / "inv.yml").write_text(inventory(keys))
    assert main(["validate", "inv.yml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: inv.yml:2:33: defaults.ssh.identity_file: identity_file ")
    assert f"  hint: chmod 600 {keys}/id\n" in err and "Traceback" not in err
    assert main(["validate", "inv.yml", "--no-controller-checks"]) == 0
    assert stat.S_IMODE((keys / "id").stat().st_mode) == 0o604  # validate never changes a file


def test_adapter_and_draft_folders_obey_the_model_folder_rules(workdir: Path, keys: Path) -> None:
    adapter, draft = workdir / "lora" / "sql", workdir / "drafts" / "eagle"
    for folder in (adapter, draft):
        folder.mkdir(parents=True)
        folder.chmod(0o777)
    text = inventory(keys) + (
        "models:\n  m:\n    source: org/m\n    hosts: a\n"
        f"    adapters: [{{name: sql, source: {adapter}}}]\n"
        f"    speculative: {{method: eagle, model: {draft}, num_speculative_tokens: 3}}\n"
    )
    found = problems(workdir, text)
    assert [line.split(": ")[1] for line in found] == [
        "models.m.adapters[0].source",
        "models.m.speculative.model",
    ]
    assert all("is world-writable" in line for line in found)


def test_a_port_of_the_wrong_type_beside_a_missing_known_hosts_is_one_clear_error(
    workdir: Path, keys: Path
) -> None:
    """Found by the CLI fuzz test: a list as the port crashed the keyscan hint (unhashable) instead of being
    reported by the schema."""
    (keys / "known").unlink()
    found = problems(workdir, inventory(keys, ssh=", port: []"))
    assert any("defaults.ssh.port" in p for p in found), found
    assert any("ssh-keyscan -p 22 10.0.0.1 10.0.0.2" in p for p in found), found
