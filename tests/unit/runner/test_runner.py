"""Runner logic over in-memory hosts: convergence, batches, --limit, max_fail_percentage, isolation, locks,
recap counts, check mode and diffs."""

from __future__ import annotations

import json

import pytest
from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.errors import InputError
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import batches, run_playbook
from vllmctl.runner.core.results import RunResult
from vllmctl.runner.fleet.hosts import host_contexts, select_hosts
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import parse_playbook

PLAYBOOK = parse_playbook(
    "name: t\nphases:\n"
    "  - name: base\n    tasks:\n      - task: base_layout\n      - task: service_user\n"
    "  - name: models\n    regather: true\n    tasks:\n"
    "      - task: model_env_files\n      - task: model_units\n"
    "  - name: services\n    tasks:\n      - task: model_services\n        start: true\n",
    "t.yml",
)
NAMES = ["h1", "h2", "h3", "h4"]


class Fleet:
    def __init__(self, names: list[str] = NAMES) -> None:
        self.inventory = inventory(
            names, {"tiny": model("tiny", tuple(names))}, groups={"even": ("h2", "h4"), "odd": ("h1", "h3")}
        )
        self.hosts = {name: FakeHost(name) for name in names}
        self.clock = [1000.0]
        self.log: list[str] = []

    def connect(self, ctx: HostContext) -> FakeRemote:
        return FakeRemote(self.hosts[ctx.host.name], self.clock, self.log)

    def run(self, limit: str | None = None, **opts: object) -> RunResult:
        contexts = host_contexts(self.inventory, select_hosts(self.inventory, limit), {"HF_TOKEN": "s3cret"})
        options = RunOptions(lock_owner="me@ctl pid=1", **opts)  # type: ignore[arg-type]
        return run_playbook(PLAYBOOK, contexts, self.connect, options, lambda: self.clock[0])


def test_first_run_changes_second_run_changes_nothing() -> None:
    fleet = Fleet()
    first = fleet.run()
    assert not first.failed
    assert all(h.recap()["changed"] == 12 for h in first.hosts.values())
    second = fleet.run()
    assert {name: h.recap() for name, h in second.hosts.items()} == {
        name: {"ok": 12, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0} for name in NAMES
    }
    assert all(h.lock is None for h in fleet.hosts.values())
    assert all(len(h.audit) == 1 for h in fleet.hosts.values())  # a no-op run writes nothing on the host


def test_a_changed_phase_marked_regather_gathers_facts_again() -> None:
    fleet = Fleet(["h1"])
    fleet.run()
    # unlocked look, again under the lock (changes ahead), and again after the changed `models` phase
    assert fleet.hosts["h1"].gathers == 3
    fleet.run()
    assert fleet.hosts["h1"].gathers == 4  # nothing to change: one look, no lock


def test_check_plans_exactly_what_apply_then_executes_and_changes_nothing() -> None:
    fleet = Fleet(["h1"])
    planned = fleet.run(check=True)
    assert fleet.hosts["h1"].executed == [] and fleet.hosts["h1"].lock is None
    assert fleet.hosts["h1"].audit == []
    planned_lines = [
        line for s in planned.hosts["h1"].steps if s.status == "planned" for line in s.step.rendered()
    ]
    fleet.run()
    assert fleet.hosts["h1"].executed == planned_lines


def test_manual_edit_shows_up_as_exactly_that_unit_with_a_diff() -> None:
    fleet = Fleet(["h1"])
    fleet.run()
    path = "/etc/systemd/system/vllmctl-tiny-0.service"
    content, mode, owner = fleet.hosts["h1"].files[path]
    fleet.hosts["h1"].files[path] = (content.replace("Restart=on-failure", "Restart=no"), mode, owner)
    result = fleet.run(check=True, diff=True)
    changed = [s for s in result.hosts["h1"].steps if s.status == "planned"]
    assert [(s.step.op, s.step.target) for s in changed] == [("systemd_unit", "vllmctl-tiny-0.service")]
    assert "-Restart=no\n+Restart=on-failure\n" in changed[0].diff
    assert fleet.hosts["h1"].files[path][0] != content  # check changed nothing


def test_secret_env_diff_is_not_shown() -> None:
    fleet = Fleet(["h1"])
    result = fleet.run(check=True, diff=True)
    env = next(s for s in result.hosts["h1"].steps if s.step.op == "env_file")
    assert env.diff == "/etc/vllmctl/tiny.env: content changed (secret, not shown)\n"
    assert "s3cret" not in json.dumps(result.to_json())


def test_limit_by_host_and_group_touches_only_those_hosts() -> None:
    fleet = Fleet()
    result = fleet.run(limit="h1,even")
    assert list(result.hosts) == ["h1", "h2", "h4"]
    assert fleet.hosts["h3"].executed == []
    with pytest.raises(InputError, match="no host or group named 'nope'"):
        fleet.run(limit="nope")


def test_one_failing_host_does_not_stop_the_others() -> None:
    fleet = Fleet()
    fleet.hosts["h2"].fail_on = "daemon-reload"
    fleet.hosts["h3"].unreachable = True
    result = fleet.run()
    assert result.failed
    assert [result.hosts[n].status for n in NAMES] == ["ok", "failed", "unreachable", "ok"]
    failed = result.hosts["h2"]
    assert "systemctl daemon-reload: exit 1" in failed.error
    assert failed.steps[-1].stderr_tail == "E: something broke"
    assert failed.recap() == {"ok": 0, "changed": 10, "failed": 1, "unreachable": 0, "skipped": 0}
    assert result.hosts["h3"].recap()["unreachable"] == 1 and "unreachable" in result.hosts["h3"].error
    assert fleet.hosts["h2"].lock is None  # a failed host still releases its lock
    fleet.hosts["h2"].fail_on = None
    fleet.hosts["h3"].unreachable = False
    again = fleet.run()
    assert not again.failed
    assert again.hosts["h1"].changed == 0 and again.hosts["h3"].changed == 12


def test_half_failed_restart_is_planned_again_next_time() -> None:
    fleet = Fleet(["h1"])
    fleet.hosts["h1"].fail_on = "systemctl start"
    assert fleet.run().failed
    fleet.hosts["h1"].fail_on = None
    second = fleet.run()
    changed = [(s.step.op, s.status) for s in second.hosts["h1"].steps if s.status != "ok"]
    assert changed == [("service", "changed")]


def test_connection_drop_mid_apply_is_unreachable_and_the_rest_finish() -> None:
    fleet = Fleet()
    fleet.hosts["h4"].drop_on = "useradd"
    result = fleet.run()
    assert result.hosts["h4"].status == "unreachable"
    assert [result.hosts[n].status for n in NAMES[:3]] == ["ok"] * 3


def test_a_held_lock_refuses_that_host_and_break_lock_clears_it() -> None:
    fleet = Fleet()
    fleet.hosts["h1"].lock = "alice@laptop pid=42 since=2026-01-01T00:00:00+00:00"
    result = fleet.run()
    assert result.hosts["h1"].status == "failed"
    assert "locked by another apply (alice@laptop pid=42" in result.hosts["h1"].error
    assert "--break-lock" in result.hosts["h1"].hint
    assert fleet.hosts["h1"].lock.startswith("alice")  # type: ignore[union-attr]
    assert fleet.hosts["h1"].executed == []
    assert not fleet.run(break_lock=True).failed


def test_a_stale_lock_broken_by_the_remote_is_named_in_the_hosts_result() -> None:
    fleet = Fleet(["h1"])
    fleet.hosts["h1"].lock, fleet.hosts["h1"].lock_stale = "me@ctl pid=9 boot=b1 cmd=apply", True
    result = fleet.run()
    assert result.hosts["h1"].status == "ok"
    assert result.hosts["h1"].broke_lock == "me@ctl pid=9 boot=b1 cmd=apply"
    assert result.hosts["h1"].to_json()["broke_lock"] == "me@ctl pid=9 boot=b1 cmd=apply"
    assert fleet.hosts["h1"].lock is None and fleet.hosts["h1"].executed


def test_batches_and_max_fail_percentage_skip_later_batches() -> None:
    fleet = Fleet()
    fleet.hosts["h1"].unreachable = True
    result = fleet.run(batch_size=2, max_fail_percentage=25)
    assert [result.hosts[n].status for n in NAMES] == ["unreachable", "ok", "skipped", "skipped"]
    assert "batch 1: 1 of 2 hosts failed" in result.aborted
    assert fleet.hosts["h3"].executed == []


def test_batches_under_the_failure_limit_keep_going() -> None:
    fleet = Fleet()
    fleet.hosts["h1"].unreachable = True
    result = fleet.run(batch_size=2, max_fail_percentage=50)
    assert [result.hosts[n].status for n in NAMES] == ["unreachable", "ok", "ok", "ok"]


def test_batches_run_in_order() -> None:
    fleet = Fleet()
    fleet.run(batch_size=1)
    hosts_in_order = [line.split(":")[0] for line in fleet.log]
    assert hosts_in_order == sorted(hosts_in_order, key=NAMES.index)


def test_seeds_run_alone_first_and_the_hook_sees_them_before_any_other_host_starts() -> None:
    fleet = Fleet()
    seen: list[tuple[list[str], list[str]]] = []

    def after_first(outcomes: object) -> None:
        started = sorted({line.split(":")[0] for line in fleet.log})
        seen.append((sorted(outcomes), started))  # type: ignore[call-overload]

    result = fleet.run(batch_size=2, first=("h3",), after_first=after_first)
    assert seen == [(["h3"], ["h3"])]  # the seed ran, and nobody else had started
    assert all(h.status == "ok" for h in result.hosts.values())
    assert batches(NAMES, 2, ("h3",)) == [["h3"], ["h1", "h2"], ["h4"]]
    assert batches(NAMES, None, ("h3",)) == [["h3"], ["h1", "h2", "h4"]]
    assert batches(NAMES, None) == [NAMES]


def test_command_deadline_is_the_smaller_of_command_and_host_time_left() -> None:
    seen: list[float] = []
    fleet = Fleet(["h1"])

    class Timed(FakeRemote):
        def execute(self, action, timeout):  # type: ignore[no-untyped-def]
            seen.append(timeout)
            self.clock[0] += 5
            return super().execute(action, timeout)

    fleet.connect = lambda ctx: Timed(fleet.hosts["h1"], fleet.clock, fleet.log)  # type: ignore[method-assign]
    result = fleet.run(command_timeout_s=30, host_timeout_s=40)
    assert seen[:2] == [30, 30] and min(seen) < 30
    assert (
        result.hosts["h1"].status == "failed" and "host deadline of 40s exceeded" in result.hosts["h1"].error
    )


def test_json_result_has_recap_and_commands() -> None:
    fleet = Fleet(["h1"])
    doc = fleet.run().to_json()
    host = doc["hosts"]["h1"]
    assert host["recap"]["changed"] == 12
    assert host["steps"][0]["commands"] == ["install -d -m 0755 -o root -g root /etc/vllmctl"]


def test_a_noop_run_takes_no_lock_so_it_never_blocks_or_is_blocked_by_a_noop() -> None:
    fleet = Fleet(["h1"])
    fleet.run()
    locks: list[str | None] = []

    class Watching(FakeRemote):
        def execute(self, action, timeout):  # type: ignore[no-untyped-def]
            locks.append(self.host.lock)
            return super().execute(action, timeout)

    fleet.connect = lambda ctx: Watching(fleet.hosts["h1"], fleet.clock, fleet.log)  # type: ignore[method-assign]
    assert fleet.run().hosts["h1"].changed == 0 and locks == []
    path = "/etc/systemd/system/vllmctl-tiny-0.service"
    _, mode, owner = fleet.hosts["h1"].files[path]
    fleet.hosts["h1"].files[path] = ("edited", mode, owner)
    assert fleet.run().hosts["h1"].changed == 1
    assert locks == ["me@ctl pid=1"] * 2  # every action ran under the lock
    assert fleet.hosts["h1"].lock is None


def test_a_held_lock_fails_even_a_noop_run_with_the_owner() -> None:
    fleet = Fleet(["h1"])
    fleet.run()
    fleet.hosts["h1"].lock = "bob@elsewhere pid=7"
    result = fleet.run()
    assert result.hosts["h1"].status == "failed" and "bob@elsewhere pid=7" in result.hosts["h1"].error


def test_only_facts_that_plan_no_change_are_kept_for_the_next_runs_fast_path() -> None:
    fleet = Fleet(["h1"])
    fleet.run(check=True)  # the first plan changes everything: nothing to keep, in --check too
    fleet.run()  # changes, under the lock: its facts are gathered again and never kept
    assert fleet.hosts["h1"].kept == 0
    fleet.run()
    fleet.run(check=True)
    assert fleet.hosts["h1"].kept == 2
    fleet.hosts["h1"].lock = None
    fleet.run(break_lock=True)  # facts read under a lock taken up front are not a probe's: not kept
    assert fleet.hosts["h1"].kept == 2
