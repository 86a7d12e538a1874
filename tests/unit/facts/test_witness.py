"""What the no-op fast path stats for each fact, and when facts have settled enough to be kept."""

from __future__ import annotations

from vllmctl.facts.witness import SETTLE_S, covers, settled, witness_command, witness_words, witnessed_paths

LINE = "/etc/vllmctl/tiny.env\t12\t200\t{m}\t{c}\t8180\t0\t0\t'/etc/vllmctl/tiny.env'"


def test_every_fact_of_the_units_playbook_has_a_witness_and_others_have_none() -> None:
    words = witness_words(
        {"paths": ("/etc/vllmctl/a b.env",), "users": ("vllm",), "units": (), "applied": ()}
    )
    assert words is not None
    paths, globs = words
    # users are read live, not witnessed; owners are shown by name, so the user and group files are
    assert paths == ["/etc/vllmctl/a b.env", "/etc/passwd", "/etc/group", "/var/lib/vllmctl/state"]
    assert "/run/systemd/units/invocation:vllmctl-*" in globs
    assert "/etc/systemd/system.control/vllmctl-*.d/*" in globs  # `systemctl set-property` drop-ins
    assert "/etc/systemd/system/*.wants/vllmctl-*" in globs  # enablement
    assert witness_words({"kernel": ()}) is None
    # the SSH user cannot stat root's records: a witness over them could never match
    assert witness_words({"paths": ("/var/lib/vllmctl/state/u.healthy",)}) is None


def test_paths_are_quoted_and_globs_are_left_to_the_shell() -> None:
    command = witness_command(
        ["/etc/vllmctl/a b.env", "/etc/x'y"], ["/run/systemd/units/invocation:vllmctl-*"]
    )
    assert "'/etc/vllmctl/a b.env'" in command and "'/etc/x'\"'\"'y'" in command
    assert command.endswith("/run/systemd/units/invocation:vllmctl-* 2>/dev/null; true")


def test_facts_are_kept_only_when_every_witnessed_time_is_older_than_the_settle_time() -> None:
    now = 1000.0
    old = LINE.format(m=now - SETTLE_S - 1, c=now - SETTLE_S - 0.5)
    assert settled([old], now)
    assert not settled([old, LINE.format(m=now - 100, c=now - 1)], now)  # a chmod a second ago
    assert not settled(["garbled"], now)
    assert witnessed_paths([old, old]) == ["/etc/vllmctl/tiny.env"]


def test_a_witness_must_have_seen_every_path_the_facts_found_and_the_unit_directory() -> None:
    line = LINE.format(m=1, c=1)
    facts = {"paths": {"/etc/vllmctl/tiny.env": {"type": "file"}, "/etc/gone": {"type": "absent"}}}
    assert covers([line], {"paths": ()}, facts)
    assert not covers([], {"paths": ()}, facts)
    assert not covers([line], {"paths": (), "units": ()}, facts)  # /etc/systemd/system unseen
    unit_dir = "/etc/systemd/system\t1\t4096\t1\t1\t41ed\t0\t0\t'/etc/systemd/system'"
    assert covers([line, unit_dir], {"paths": (), "units": ()}, facts)
