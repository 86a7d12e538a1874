"""`vllmctl status`: service state and release from host facts, health and metrics over real HTTP, advice."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from vllmctl import cli
from vllmctl.bench.endpoints import Endpoint
from vllmctl.commands import status as status_command
from vllmctl.console import Ui
from vllmctl.inventory import load_inventory
from vllmctl.planner.inventory_plan import InventoryPlan
from vllmctl.runner.status import collect as status_flow
from vllmctl.runner.status.collect import scrape_all
from vllmctl.status.build import Scrape, build_statuses
from vllmctl.status.metrics import parse_metrics

from .test_plan_from_status_command import _inventory

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu"
QUEUEING = (FIXTURES / "metrics_queueing.txt").read_text()


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inv.yml"
    path.write_text(
        "vllmctl: 1\n"
        "hosts:\n"
        "  a: {address: 127.0.0.1}\n"
        "  b: {address: 127.0.0.2}\n"
        "models:\n"
        "  tiny: {source: /srv/tiny, hosts: [a, b], port: 8000, engine_args: {max_num_seqs: 2}}\n"
    )
    return path


def _metrics() -> Scrape:
    return Scrape(True, next(iter(parse_metrics(QUEUEING).values())))


def test_statuses_combine_facts_metrics_and_advice(inventory: Path) -> None:
    inv = load_inventory(inventory)
    endpoints = [
        Endpoint("a", "tiny", 0, "http://127.0.0.1:8000"),
        Endpoint("b", "tiny", 0, "http://127.0.0.2:8000"),
    ]
    facts = {
        "a": {
            "facts": {
                "units": {"vllmctl-tiny-0.service": {"active_state": "active"}},
                "releases": {"current": "r7"},
            }
        },
        "b": {"error": "connection refused", "hint": "is sshd running?"},
    }
    statuses = build_statuses(
        inv, endpoints, facts, InventoryPlan(()), [_metrics(), _metrics()], [_metrics(), _metrics()], 1.0
    )
    first, second = statuses
    assert (first.service_state, first.release, first.healthy) == ("active", "r7", True)
    assert first.metrics is not None and first.metrics.requests_waiting > 0
    assert [a.code for a in first.advice] == ["max-num-seqs-too-low"]
    assert first.ok
    assert second.error == "unreachable: connection refused"
    assert not second.ok


@pytest.fixture
def server(queueing_vllm_port: int) -> str:
    return f"http://127.0.0.1:{queueing_vllm_port}"


def test_scrape_reads_health_and_metrics_over_http(server: str) -> None:
    up, down = scrape_all([Endpoint("a", "tiny", 0, server), Endpoint("a", "tiny", 1, "http://127.0.0.1:9")])
    assert up.healthy is True and up.metrics is not None
    assert up.metrics.requests_running == 2
    assert down.healthy is False and down.metrics is None
    assert "ConnectError" in down.error


def test_status_lists_the_adapters_a_replica_serves(inventory: Path, server: str) -> None:
    from vllmctl.status.view import status_json, status_rows

    inv = load_inventory(inventory)
    endpoint = Endpoint("a", "tiny", 0, server)
    asked, plain = scrape_all([endpoint], with_adapters={"tiny"}), scrape_all([endpoint])
    assert (asked[0].adapters, plain[0].adapters) == (("alpha", "beta"), None)
    facts = {"a": {"facts": {"units": {}, "releases": {}}}}
    statuses = build_statuses(inv, [endpoint], facts, InventoryPlan(()), asked, asked, 1.0)
    assert status_json(statuses)["entries"][0]["adapters"] == ["alpha", "beta"]
    assert status_rows(statuses)[0]["model"] == "tiny +alpha,beta"


def test_status_json_is_machine_readable(inventory: Path, server: str) -> None:
    from vllmctl.status.view import status_json

    inv = load_inventory(inventory)
    endpoint = Endpoint("a", "tiny", 0, server)
    facts = {
        "a": {"facts": {"units": {"vllmctl-tiny-0.service": {"active_state": "failed"}}, "releases": {}}}
    }
    scraped = scrape_all([endpoint])
    statuses = build_statuses(inv, [endpoint], facts, InventoryPlan(()), scraped, scraped, 1.0)
    payload = json.loads(json.dumps(status_json(statuses)))
    entry = payload["entries"][0]
    assert payload["ok"] is False  # healthy over HTTP, but systemd says the unit failed
    assert (entry["service_state"], entry["healthy"], entry["ok"]) == ("failed", True, False)
    assert entry["metrics"]["requests_waiting"] > 0


def _manifest(predicted: int, measured: int) -> dict[str, object]:
    """The current release's manifest as the gate leaves it: prediction and measurement per unit."""
    kv = {
        "predicted": {"kv_tokens": predicted},
        "measured": {"vllmctl-tiny-0.service": {"kv_tokens": measured}},
    }
    return {"id": "r7", "plan": {"tiny": {"engine_args": {}, "kv": kv}}}


@pytest.mark.parametrize(
    ("predicted", "measured", "deviation", "off_plan"),
    [
        (1_048_576, 1_048_576, 0.0, False),
        (1_000_000, 1_048_576, 0.048576, False),
        (900_000, 1_048_576, 0.1651, True),
    ],
)
def test_status_shows_measured_against_planned_from_the_release_manifest(
    inventory: Path, predicted: int, measured: int, deviation: float, off_plan: bool
) -> None:
    from vllmctl.status.view import findings, status_json, status_row

    inv = load_inventory(inventory)
    endpoint = Endpoint("a", "tiny", 0, "http://127.0.0.1:8000")
    units = {"vllmctl-tiny-0.service": {"active_state": "active"}}
    facts = {
        "a": {
            "facts": {"units": units, "releases": {"current": "r7"}},
            "manifest": _manifest(predicted, measured),
        }
    }
    (status,) = build_statuses(inv, [endpoint], facts, InventoryPlan(()), [_metrics()], [_metrics()], 1.0)
    kv = status_json([status])["entries"][0]["kv"]
    assert (kv["planned_tokens"], kv["measured_tokens"], kv["off_plan"]) == (predicted, measured, off_plan)
    assert kv["deviation"] == pytest.approx(deviation, abs=1e-4)
    cell = status_row(status)["kv_tokens"]
    assert cell.startswith(f"{measured:,} ({deviation:+.1%} vs plan)")
    assert cell.endswith(" !") == off_plan
    flagged = [line for line in findings([status]) if "off the planned" in line]
    assert len(flagged) == int(off_plan)


def test_without_a_recorded_measurement_the_servers_own_kv_capacity_stands_in(inventory: Path) -> None:
    inv = load_inventory(inventory)
    endpoint = Endpoint("a", "tiny", 0, "http://127.0.0.1:8000")
    facts = {
        "a": {"facts": {"units": {}, "releases": {}}, "manifest": {"plan": {"tiny": {"engine_args": {}}}}}
    }
    (status,) = build_statuses(inv, [endpoint], facts, InventoryPlan(()), [_metrics()], [_metrics()], 1.0)
    assert status.planned_kv_tokens is None and status.measured_kv_tokens is None
    assert status.kv_tokens == _metrics().metrics.kv_capacity_tokens  # type: ignore[union-attr]


def test_scrapes_between_the_first_and_last_are_evidence_too(inventory: Path) -> None:
    from vllmctl.status.metrics import EngineMetrics

    def scraped(running: float) -> Scrape:
        return Scrape(True, EngineMetrics("vllm", "tiny", running, requests_waiting=6, kv_usage=0.01))

    inv = load_inventory(inventory)
    endpoint = Endpoint("a", "tiny", 0, "http://127.0.0.1:8000")
    facts = {"a": {"facts": {"units": {}, "releases": {}}}}
    # both ends read right after a request finished: one slot looks free although the next step refills it
    (ends,) = build_statuses(inv, [endpoint], facts, InventoryPlan(()), [scraped(1)], [scraped(1)], 3.0)
    assert [a.code for a in ends.advice] == ["prefill-budget-too-low"]
    (sampled,) = build_statuses(
        inv,
        [endpoint],
        facts,
        InventoryPlan(()),
        [scraped(1)],
        [scraped(1)],
        3.0,
        [[scraped(2)], [scraped(2)]],
    )
    assert [a.code for a in sampled.advice] == ["max-num-seqs-too-low"]
    assert sampled.advice[0].evidence["running_max"] == 2
    assert sampled.metrics is not None and sampled.metrics.requests_running == 1  # the last scrape is shown


def test_a_scrape_that_missed_its_deadline_leaves_the_latest_answer_standing(inventory: Path) -> None:
    inv = load_inventory(inventory)
    endpoint = Endpoint("a", "tiny", 0, "http://127.0.0.1:8000")
    facts = {
        "a": {"facts": {"units": {"vllmctl-tiny-0.service": {"active_state": "active"}}, "releases": {}}}
    }
    missed = Scrape(False, None, "ReadTimeout: timed out")
    (status,) = build_statuses(
        inv, [endpoint], facts, InventoryPlan(()), [missed], [missed], 3.0, [[_metrics()]]
    )
    assert status.metrics is not None and status.metrics.requests_waiting == 6
    assert (status.healthy, status.error, status.rates) == (True, "", None)
    (silent,) = build_statuses(inv, [endpoint], facts, InventoryPlan(()), [missed], [missed], 3.0)
    assert (silent.metrics, silent.healthy, silent.error) == (None, False, "ReadTimeout: timed out")


def test_status_shows_the_held_lock_its_facts_report(
    tmp_path: Path, queueing_vllm_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    since = (datetime.now(UTC) - timedelta(minutes=4, seconds=12)).isoformat(timespec="seconds")
    owner = f"root@ctl pid=123 since={since} boot=b1 cmd=apply"
    asked: list[dict[str, tuple[str, ...]]] = []

    class Host:
        def gather(self, requests: dict[str, tuple[str, ...]], timeout: float) -> dict[str, Any]:
            asked.append(requests)
            units = {"vllmctl-tiny-0.service": {"active_state": "active"}}
            return {"units": units, "releases": {"current": "r1"}, "lock": owner}

        def read_file(self, path: str, timeout: float) -> None:
            return None

    monkeypatch.setattr(
        status_flow, "on_each_host", lambda contexts, one, forks: {n: one(Host()) for n in contexts}
    )
    inventory = _inventory(tmp_path, queueing_vllm_port)
    argv = ["status", str(inventory), "--interval", "0.05"]
    out, err = io.StringIO(), io.StringIO()
    assert status_command.run(cli.build_parser().parse_args([*argv, "--json"]), Ui(out=out, err=err)) == 0
    assert asked == [{"units": (), "releases": (), "lock": ()}]
    shown = json.loads(out.getvalue())["locks"]
    assert shown["a"]["pid"] == 123 and shown["a"]["owner"] == owner
    assert shown["a"]["age_s"] in range(252, 252 + 60)

    out, err = io.StringIO(), io.StringIO()
    assert status_command.run(cli.build_parser().parse_args(argv), Ui(out=out, err=err)) == 0
    assert "warning: a: locked by root@ctl pid=123 (apply) for 4m" in err.getvalue()


def test_a_stopped_unit_with_processes_left_says_its_old_engine_still_runs(inventory: Path) -> None:
    """#36: systemd stopped the unit (failed) but its cgroup still holds processes: not a bare failure."""
    from vllmctl.status.view import status_json, status_rows

    inv = load_inventory(inventory)
    endpoints = [
        Endpoint("a", "tiny", 0, "http://127.0.0.1:9"),
        Endpoint("b", "tiny", 0, "http://127.0.0.2:9"),
    ]
    failed = {"active_state": "failed", "processes": "3"}
    facts = {
        "a": {"facts": {"units": {"vllmctl-tiny-0.service": failed}, "releases": {}}},
        # a running unit's processes are its engine, not left over
        "b": {"facts": {"units": {"vllmctl-tiny-0.service": {"active_state": "active", "processes": "3"}}}},
    }
    none = [Scrape(False, None, "connection refused") for _ in endpoints]
    statuses = build_statuses(inv, endpoints, facts, InventoryPlan(()), none, none, 1.0)
    entries = {e["host"]: e for e in status_json(statuses)["entries"]}
    assert (entries["a"]["service_state"], entries["a"]["left_over_processes"]) == ("failed", 3)
    assert entries["b"]["left_over_processes"] == 0
    rows = {row["host"]: row for row in status_rows(statuses)}
    assert "failed, old engine still running after stop (3 processes)" in rows["a"].values()
