"""The runner with the release gate as its after-host hook: the gate runs under the host lock, a host whose
release fails stops the rollout (--max-fail 0), and the host's result carries the gate's outcome."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gate_flow import VENV, apply_units, health, opts
from local_remote import LocalRemote

from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, ModelDeployment, SshSettings
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.releases.release import gate_host, read_releases
from vllmctl.runner.releases.rollout import rollout_guard
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Phase, Playbook

PLAYBOOK = Playbook("site", "site.yml", (Phase("services", ()),), serial=1)


def fleet(tmp_path: Path, names: list[str], engine_args: dict[str, Any]) -> dict[str, Any]:
    hosts = {
        n: Host(n, f"10.0.0.{i + 1}", SshSettings(), None, DriverSpec(), EngineSpec())
        for i, n in enumerate(names)
    }
    model = ModelDeployment("m", "/srv/models/tiny", tuple(names), engine_args=engine_args)
    inv = Inventory(path="inv.yml", hosts=hosts, groups={}, models={"m": model})
    contexts = {n: HostContext(inv, hosts[n]) for n in names}
    remotes = {}
    for n in names:
        remote = LocalRemote(tmp_path / n, n)
        python = remote.local(VENV) / "bin" / "python"
        python.parent.mkdir(parents=True, exist_ok=True)
        python.touch(mode=0o755)
        remotes[n] = remote
    return {"contexts": contexts, "remotes": remotes}


def run(setup: dict[str, Any], second: int) -> Any:
    contexts, remotes = setup["contexts"], setup["remotes"]
    any_remote = next(iter(remotes.values()))
    gate_opts = opts(any_remote, second)

    def after_host(c: HostContext, remote: Any, lock: Any, failure: str) -> dict[str, Any]:
        apply_units(remote, c)  # what the playbook's services phase did on this host
        return gate_host(c, remote, lock, replace(gate_opts, health=health(remote)), failure).to_json()

    guard = rollout_guard(contexts["a"].inventory, {}, len(contexts), MaxFail(), None, probe=lambda r: False)
    options = RunOptions(forks=2, lock_owner="test", after_host=after_host, guard=guard)
    return run_playbook(PLAYBOOK, contexts, lambda c: remotes[c.host.name], options, lambda: 0.0)


def test_gate_runs_under_the_lock_and_a_failed_release_stops_the_rollout(tmp_path: Path) -> None:
    good = fleet(tmp_path, ["a", "b"], {"max_num_seqs": 8})
    first = run(good, 1)
    assert not first.failed
    assert [first.hosts[n].release["status"] for n in "ab"] == ["passed", "passed"]
    assert all(r.audit and r.audit[-1]["by"] == "test" for r in good["remotes"].values())
    assert not any(r.local("/var/lib/vllmctl/lock").exists() for r in good["remotes"].values())

    bad = {**good, "contexts": fleet(tmp_path / "x", ["a", "b"], {"bogus": True})["contexts"]}
    second = run(bad, 2)
    a, b = second.hosts["a"], second.hosts["b"]
    assert a.status == "failed" and a.release["status"] == "rolled_back"
    assert "--bogus" in a.hint
    assert b.status == "skipped" and "the rollout stopped: 1 failed (a)" in second.aborted
    assert b.error.startswith("not started: the rollout stopped")
    assert read_releases(good["remotes"]["a"], "a", 10).current == first.hosts["a"].release["release"]
    assert "--bogus" not in good["remotes"]["b"].local("/etc/systemd/system/vllmctl-m-0.service").read_text()


def test_only_playbooks_that_start_services_are_gated() -> None:
    from vllmctl.runner.apply_hooks import gates
    from vllmctl.tasks.playbooks import load_playbook

    assert gates(load_playbook("site"))
    assert not gates(load_playbook("units"))  # writes units with start: false; nothing would become healthy
    assert not gates(load_playbook("drivers"))
