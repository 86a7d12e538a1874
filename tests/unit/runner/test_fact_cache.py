"""The no-op fast path against a real shell and real files: facts kept only when they planned no change and
have settled, reused only while the witness (read without sudo) is unchanged, re-read under sudo otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllmctl.facts.witness import SETTLE_S
from vllmctl.runner.core.fact_cache import FactCache
from vllmctl.runner.core.remote import HostLockedError, SshRemote
from vllmctl.transport import Result

REQUESTS = {"paths": ("/etc/vllmctl/tiny.env", "/var/lib/vllmctl/state"), "users": ("root",), "applied": ()}


class Host:
    """`sh` on this machine with vllmctl's directories moved under `root`; remembers how each script ran."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs: list[bool] = []  # sudo?
        (root / "etc").mkdir(parents=True)
        (root / "lib" / "state").mkdir(parents=True)
        (root / "etc" / "tiny.env").write_text("TOKEN=aaaa\n")
        (root / "lib" / "state" / "u.service.applied").write_text("h1")

    def run(
        self, cmd: str, sudo: bool = False, timeout: float | None = None, stdin: bytes | None = None
    ) -> Result:
        self.runs.append(sudo)
        local = cmd.replace("/var/lib/vllmctl", str(self.root / "lib")).replace(
            "/etc/vllmctl", str(self.root / "etc")
        )
        done = subprocess.run(["sh", "-c", local], capture_output=True, text=True, check=False)
        out = done.stdout.replace(str(self.root / "lib"), "/var/lib/vllmctl")
        return Result(out.replace(str(self.root / "etc"), "/etc/vllmctl"), done.stderr, done.returncode)

    def remote(self, cache: FactCache) -> SshRemote:
        target = SimpleNamespace(user="ops", hostname="10.0.0.1", port=22, jumps=(), proxy_command=None)
        transport = SimpleNamespace(host=SimpleNamespace(name="h"), run=self.run, target=target)
        return SshRemote(transport, cache)  # type: ignore[arg-type]


def kept(host: Host, root: Path) -> FactCache:
    """A cache holding the facts of one no-op run on `host`."""
    cache = FactCache(root / "cache")
    first = host.remote(cache)
    first.begin(REQUESTS, None, False, 30)
    first.keep_facts()
    return cache


def nothing_kept(cache: FactCache) -> bool:
    return not cache.root.exists() or not list(cache.root.iterdir())


def settle() -> None:
    time.sleep(SETTLE_S + 0.2)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    made = Host(tmp_path / "host")
    settle()
    return made


def test_kept_facts_are_reused_without_sudo_until_a_file_they_rest_on_changes(
    host: Host, tmp_path: Path
) -> None:
    cache = FactCache(tmp_path / "cache")
    first = host.remote(cache)
    facts = first.begin(REQUESTS, None, False, 30)
    assert host.runs == [True] and not first.reused and facts["applied"] == {"u.service": "h1"}
    first.keep_facts()
    assert [p.stat().st_mode & 0o777 for p in cache.root.iterdir()] == [0o600]

    again = host.remote(cache)
    assert again.begin(REQUESTS, None, False, 30) == facts
    assert again.reused and host.runs == [True, False]  # one script, as the SSH user

    (host.root / "etc" / "tiny.env").write_text("TOKEN=bbbb\n")  # same size, new content
    changed = host.remote(cache)
    fresh = changed.begin(REQUESTS, None, False, 30)
    assert not changed.reused and host.runs[2:] == [False, True]  # the witness differed: read under sudo
    assert (
        fresh["paths"]["/etc/vllmctl/tiny.env"]["sha256"] != facts["paths"]["/etc/vllmctl/tiny.env"]["sha256"]
    )


def test_a_record_written_in_roots_directory_is_seen_through_the_directory(
    host: Host, tmp_path: Path
) -> None:
    cache = kept(host, tmp_path)
    state = host.root / "lib" / "state"
    (state / ".tmp").write_text("h2")
    os.replace(state / ".tmp", state / "u.service.applied")  # how vllmctl writes every record
    later = host.remote(cache)
    assert later.begin(REQUESTS, None, False, 30)["applied"] == {"u.service": "h2"} and not later.reused


def test_facts_over_files_changed_within_the_settle_time_are_not_kept(host: Host, tmp_path: Path) -> None:
    (host.root / "etc" / "tiny.env").write_text("TOKEN=cccc\n")
    assert nothing_kept(kept(host, tmp_path))


def test_other_requests_or_a_fact_without_a_witness_read_everything_under_sudo(
    host: Host, tmp_path: Path
) -> None:
    cache = kept(host, tmp_path)
    host.runs.clear()
    other = host.remote(cache)
    other.begin({**REQUESTS, "paths": ("/etc/vllmctl/tiny.env",)}, None, False, 30)
    assert host.runs == [True] and not other.reused
    unwitnessed = host.remote(cache)
    assert "kernel" in unwitnessed.begin({**REQUESTS, "kernel": ()}, None, False, 30)
    assert host.runs == [True, True] and not unwitnessed.reused


def test_the_fast_path_still_refuses_a_locked_host(host: Host, tmp_path: Path) -> None:
    cache = kept(host, tmp_path)
    (host.root / "lib" / "lock").mkdir()
    (host.root / "lib" / "lock" / "owner").write_text("bob@ctl pid=7\n")
    host.runs.clear()
    with pytest.raises(HostLockedError, match="bob@ctl pid=7"):
        host.remote(cache).begin(REQUESTS, None, False, 30)
    assert host.runs == [False]


def test_a_witness_that_saw_nothing_is_never_kept(host: Host, tmp_path: Path) -> None:
    """A host whose `stat` prints nothing (no GNU stat) would otherwise match the kept witness forever."""
    real_run = host.run

    def no_stat(
        cmd: str, sudo: bool = False, timeout: float | None = None, stdin: bytes | None = None
    ) -> Result:
        return real_run(cmd.replace("stat --printf", "no-such-stat --printf"), sudo, timeout, stdin)

    host.run = no_stat  # type: ignore[method-assign]
    cache = FactCache(tmp_path / "cache")
    first = host.remote(cache)
    assert first.begin(REQUESTS, None, False, 30)["applied"] == {"u.service": "h1"}
    first.keep_facts()
    assert nothing_kept(cache)


def test_a_run_that_takes_the_lock_drops_the_kept_facts(host: Host, tmp_path: Path) -> None:
    cache = kept(host, tmp_path)
    assert len(list(cache.root.iterdir())) == 1
    host.remote(cache).begin(REQUESTS, "me@ctl pid=1", False, 30)
    assert list(cache.root.iterdir()) == []
    shutil.rmtree(host.root / "lib" / "lock")  # that run's finish
    host.runs.clear()
    host.remote(cache).begin(REQUESTS, None, False, 30)
    assert host.runs == [True]  # straight to sudo: no witness to try
