"""Release steps as exact command lists: create (immutable), activate (stop → start), verdict, prune."""

from __future__ import annotations

from builders import host_state, manifest

from vllmctl.ops.base import sha256_text
from vllmctl.ops.engine_gone import SCRIPT as ENGINE_GONE
from vllmctl.ops.release import activate_release, create_release, prune_releases, record_verdict

RD = "/var/lib/vllmctl/releases"


def test_create_release_writes_complete_marker_last() -> None:
    step = create_release(manifest("r2"), host_state({"releases": [{"id": "r1", "status": "good"}]}))
    rendered = step.rendered()
    assert rendered[0] == f"install -d -m 0755 -o root -g root {RD}/r2 {RD}/r2/units"
    assert rendered[1].startswith(f"upload {RD}/r2/manifest.json mode=0644 owner=root:root (sha256 ")
    assert rendered[2].startswith(f"upload {RD}/r2/units/vllmctl-m-0.service mode=0644")
    assert rendered[3] == f"touch {RD}/r2/complete"
    assert len(rendered) == 4


def test_create_release_never_rewrites_a_complete_one_but_redoes_a_half_made_one() -> None:
    done = host_state({"releases": [{"id": "r2", "status": "pending"}]})
    assert create_release(manifest("r2"), done).noop == "release r2 is already on the host"
    half = host_state({"releases": [{"id": "r2", "status": "incomplete"}]})
    assert create_release(manifest("r2"), half).rendered()[0] == f"rm -rf -- {RD}/r2"


def test_activate_is_stop_then_units_from_the_release_then_start_then_pointer() -> None:
    units = {"vllmctl-m-0.service": "x", "vllmctl-m-1.service": "y"}
    step = activate_release(
        manifest("r1", units=units),
        running_units=["vllmctl-m-0.service", "vllmctl-old-0.service"],
        installed_units=["vllmctl-m-0.service", "vllmctl-old-0.service"],
        env_files={"vllmctl-m-0.service": "/etc/vllmctl/m.env"},
    )
    state = "/var/lib/vllmctl/state"
    assert step.rendered() == [
        "systemctl stop -- vllmctl-m-0.service vllmctl-old-0.service",
        "systemctl disable -- vllmctl-old-0.service",
        "rm -f -- /etc/systemd/system/vllmctl-old-0.service",
        f"install -m 0644 -o root -g root {RD}/r1/units/vllmctl-m-0.service "
        "/etc/systemd/system/vllmctl-m-0.service",
        f"install -m 0644 -o root -g root {RD}/r1/units/vllmctl-m-1.service "
        "/etc/systemd/system/vllmctl-m-1.service",
        "systemctl daemon-reload",
        "rm -f -- /var/lib/vllmctl/state/vllmctl-m-0.service.applied "
        "/var/lib/vllmctl/state/vllmctl-m-0.service.healthy "
        "/var/lib/vllmctl/state/vllmctl-m-1.service.applied "
        "/var/lib/vllmctl/state/vllmctl-m-1.service.healthy "
        "/var/lib/vllmctl/state/vllmctl-old-0.service.applied "
        "/var/lib/vllmctl/state/vllmctl-old-0.service.healthy",
        "systemctl enable -- vllmctl-m-0.service vllmctl-m-1.service",
        # nothing of the stopped engines left in their cgroups or on their GPUs before the start
        "umask 022 && mkdir -p -- /var/lib/vllmctl/bin",
        "upload /var/lib/vllmctl/bin/engine-gone.py mode=0755 owner=root:root "
        f"(sha256 {sha256_text(ENGINE_GONE)[:12]})",
        "python3 /var/lib/vllmctl/bin/engine-gone.py 30 vllmctl-m-0.service vllmctl-m-1.service",
        "systemctl start -- vllmctl-m-0.service vllmctl-m-1.service",
        # the applied records rewritten from what was started (unit NUL env file), as apply digests them
        "umask 077 && { cat -- /etc/systemd/system/vllmctl-m-0.service && printf '\\000' && "
        "cat -- /etc/vllmctl/m.env 2>/dev/null; true; } | sha256sum | cut -c1-64 | tr -d '\\n' > "
        f"{state}/.vllmctl-m-0.service.applied.tmp && mv -f -- {state}/.vllmctl-m-0.service.applied.tmp "
        f"{state}/vllmctl-m-0.service.applied",
        "umask 077 && { cat -- /etc/systemd/system/vllmctl-m-1.service && printf '\\000' && true; } | "
        f"sha256sum | cut -c1-64 | tr -d '\\n' > {state}/.vllmctl-m-1.service.applied.tmp && "
        f"mv -f -- {state}/.vllmctl-m-1.service.applied.tmp {state}/vllmctl-m-1.service.applied",
        f"cd {RD} && test -f r1/complete && ln -sfn r1 .current.tmp && mv -T .current.tmp current",
    ]


def test_verdict_moves_known_good_only_when_passed() -> None:
    good = record_verdict("r1", {"passed": True, "reasons": [], "figures": {}}).rendered()
    assert good[0].startswith(f"upload {RD}/r1/verdict.json mode=0644")
    assert (
        good[1]
        == f"cd {RD} && test -f r1/complete && ln -sfn r1 .known-good.tmp && mv -T .known-good.tmp known-good"
    )
    bad = record_verdict("r2", {"passed": False, "reasons": ["m: SLO miss"], "figures": {}}).rendered()
    assert len(bad) == 1 and "verdict.json" in bad[0]


def test_prune_removes_named_dirs_in_one_command() -> None:
    assert prune_releases(["r2", "r1"]).rendered() == [f"rm -rf -- {RD}/r1 {RD}/r2"]
    assert prune_releases([]).noop == "no release to prune"
