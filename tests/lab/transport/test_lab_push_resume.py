"""Controller transfers over real SSH: a push cut off part-way resumes from the bytes already on the host,
and a partial copy whose sha256 is wrong once complete never counts: it is removed and the next push sends
the whole file. Partials of files no run has asked for in a day are cleared. A command's output arrives
whole, however large."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllmctl.inventory import load_inventory
from vllmctl.lab.testing import LabFleet
from vllmctl.paths import incoming_dir, push_partial
from vllmctl.transport import SshTransport

pytestmark = pytest.mark.lab

SIZE = 3_000_000
CUT_AT = 2_000_000


@pytest.fixture
def target(lab_fleet: LabFleet) -> Iterator[tuple[SshTransport, str]]:
    inventory = load_inventory(lab_fleet.inventory)
    transport = SshTransport(inventory.hosts[lab_fleet.hosts[3].name])  # a spare host: nothing deployed there
    folder = f"/var/tmp/vllmctl-resume-{os.getpid()}"
    user = transport.target.user
    ready = transport.run(
        f"mkdir -p {folder} && install -d -m 0700 -o {user} {incoming_dir(user)}", sudo=True
    )
    assert ready.ok, ready.failure()
    yield transport, folder
    transport.run(["rm", "-rf", folder], sudo=True, timeout=60)
    transport.close()


def leave_partial(transport: SshTransport, sha256: str, data: bytes) -> str:
    """What a push cut off after len(data) bytes leaves on the host."""
    user = transport.target.user
    path = push_partial(user, sha256)
    group = transport.run(["id", "-gn", user], timeout=30).stdout.strip()
    assert transport.put(data, path, mode="0600", owner=user, group=group, timeout=60).ok
    return path


def exists(transport: SshTransport, path: str) -> bool:
    return transport.run(["test", "-e", path], sudo=True, timeout=30).ok


def host_sha256(transport: SshTransport, path: str) -> str:
    return transport.run(["sha256sum", path], sudo=True, timeout=60).stdout.split()[0]


def source_file(tmp_path: Path) -> tuple[Path, str]:
    payload = os.urandom(SIZE)
    source = tmp_path / "weights.safetensors"
    source.write_bytes(payload)
    return source, hashlib.sha256(payload).hexdigest()


def test_a_cut_off_push_resumes_from_the_bytes_already_on_the_host(
    target: tuple[SshTransport, str], tmp_path: Path
) -> None:
    transport, folder = target
    source, sha = source_file(tmp_path)
    partial = leave_partial(transport, sha, source.read_bytes()[:CUT_AT])
    old_other = leave_partial(transport, "0" * 64, b"a day-old push of a file nothing asks for")
    fresh_other = leave_partial(transport, "1" * 64, b"another file's push, cut off a minute ago")
    assert transport.run(["touch", "-d", "2 days ago", old_other], sudo=True, timeout=30).ok

    pushed = transport.put_file(str(source), f"{folder}/weights.safetensors", sha)

    assert pushed.ok, pushed.failure("pushing")
    assert pushed.stdout.startswith(f"sent {SIZE - CUT_AT} of {SIZE} bytes, resumed at byte {CUT_AT}\n")
    assert host_sha256(transport, f"{folder}/weights.safetensors") == sha
    assert not exists(transport, partial)
    assert not exists(transport, old_other) and exists(transport, fresh_other)
    transport.run(["rm", "-f", fresh_other], sudo=True, timeout=30)


def test_a_partial_with_wrong_bytes_is_removed_and_never_counted(
    target: tuple[SshTransport, str], tmp_path: Path
) -> None:
    transport, folder = target
    source, sha = source_file(tmp_path)
    partial = leave_partial(transport, sha, os.urandom(CUT_AT))  # not the file's first bytes

    refused = transport.put_file(str(source), f"{folder}/weights.safetensors", sha)

    assert not refused.ok
    assert "sha256 mismatch" in refused.stderr and "partial copy was removed" in refused.stderr
    assert not exists(transport, partial) and not exists(transport, f"{folder}/weights.safetensors")
    again = transport.put_file(str(source), f"{folder}/weights.safetensors", sha)
    assert again.ok, again.failure("pushing again")
    assert again.stdout.startswith(f"sent {SIZE} of {SIZE} bytes\n")
    assert host_sha256(transport, f"{folder}/weights.safetensors") == sha


def test_a_partial_longer_than_the_file_starts_the_push_over(
    target: tuple[SshTransport, str], tmp_path: Path
) -> None:
    transport, folder = target
    source, sha = source_file(tmp_path)
    leave_partial(transport, sha, source.read_bytes() + b"trailing bytes of some other run")

    pushed = transport.put_file(str(source), f"{folder}/weights.safetensors", sha)

    assert pushed.ok, pushed.failure("pushing")
    assert pushed.stdout.startswith(f"sent {SIZE} of {SIZE} bytes\n")
    assert host_sha256(transport, f"{folder}/weights.safetensors") == sha


def test_a_commands_whole_output_arrives_however_large(target: tuple[SshTransport, str]) -> None:
    """sshd may send the exit status before the last of the output (facts of an 8-GPU host, 33 KB, were cut at
    32,768 bytes in 5 of 60 reads): the transport reads on to the end of the output."""
    transport, _ = target
    script = "head -c 300000 /dev/zero | tr '\\0' x; head -c 100000 /dev/zero | tr '\\0' y >&2"
    sizes = {(len(r.stdout), len(r.stderr)) for r in (transport.run(script, timeout=60) for _ in range(40))}
    assert sizes == {(300_000, 100_000)}
