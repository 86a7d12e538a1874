"""The status rows, table, findings and JSON built from gathered per-engine results."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from vllmctl.status.advice import advise
from vllmctl.status.metrics import EngineMetrics, Rates, parse_metrics
from vllmctl.status.model import ModelStatus
from vllmctl.status.view import (
    COLUMNS,
    HEADERS,
    findings,
    lock_lines,
    status_json,
    status_row,
    status_rows,
    status_screen,
    status_table,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm_cpu"
QUEUEING = next(iter(parse_metrics((FIXTURES / "metrics_queueing.txt").read_text()).values()))


def healthy(**overrides: Any) -> ModelStatus:
    base = ModelStatus(
        host="gpu-01",
        model="tiny",
        port=18200,
        service_state="active",
        release="r20261121-0812",
        healthy=True,
        metrics=QUEUEING,
        rates=Rates(6.0, 0.0, 45.06, 726.66, 1.64),
        advice=tuple(advise("vllm", {"max_num_seqs": 2}, [QUEUEING])),
        planned_kv_tokens=768,
    )
    return replace(base, **overrides)


def test_row_of_a_queueing_server() -> None:
    assert status_row(healthy()) == {
        "host": "gpu-01",
        "model": "tiny",
        "port": "18200",
        "service": "active",
        "release": "r20261121-0812",
        "health": "ok",
        "running": "2",
        "waiting": "6",
        "kv_used": "35%",
        "preempted": "0 (0.00/s)",
        "tokens_per_s": "45.1/726.7",
        "prefix_hits": "0% (-)",
        "kv_tokens": "768 (+0.0% vs plan)",
        "advice": "max-num-seqs-too-low",
    }


@pytest.mark.parametrize(
    ("planned", "measured", "cell", "off"),
    [
        (800, 768, "768 (-4.0% vs plan)", False),  # within 5 %
        (700, 768, "768 (+9.7% vs plan) !", True),
        (1000, 768, "768 (-23.2% vs plan) !", True),
        (None, 768, "768", False),
    ],
)
def test_kv_off_plan_by_more_than_5_percent_is_flagged(
    planned: int | None, measured: int, cell: str, off: bool
) -> None:
    status = healthy(planned_kv_tokens=planned, measured_kv_tokens=measured)
    assert status_row(status)["kv_tokens"] == cell
    assert status.kv_off_plan is off


def test_startup_log_figure_wins_over_the_metrics_capacity() -> None:
    status = healthy(measured_kv_tokens=700)
    assert status.kv_tokens == 700
    assert healthy().kv_tokens == 768  # vllm:cache_config_info kv_cache_size_tokens


def test_an_unreachable_host_shows_dashes() -> None:
    down = ModelStatus("gpu-02", "tiny", 8000, error="unreachable: timed out", planned_kv_tokens=1000)
    row = status_row(down)
    assert row["health"] == "unreachable"
    assert (row["service"], row["release"], row["running"], row["kv_used"]) == ("unknown", "-", "-", "-")
    assert row["kv_tokens"] == "plan 1,000"
    assert row["advice"] == "-"
    assert not down.ok


def test_a_failed_service_is_not_ok() -> None:
    failed = healthy(service_state="failed", healthy=None, metrics=None, rates=None, advice=())
    assert status_row(failed)["health"] == "-"
    assert not failed.ok


def test_rows_are_sorted_by_host_model_port() -> None:
    statuses = [healthy(host="b"), healthy(host="a", port=2), healthy(host="a", port=1)]
    assert [(r["host"], r["port"]) for r in status_rows(statuses)] == [("a", "1"), ("a", "2"), ("b", "18200")]


def test_table_renders_every_column() -> None:
    out = io.StringIO()
    Console(file=out, width=250, no_color=True).print(status_table([healthy()]))
    header, line = out.getvalue().splitlines()
    assert re.split(r"\s{2,}", header.strip()) == [HEADERS[c] for c in COLUMNS]
    assert re.split(r"\s{2,}", line.strip()) == list(status_row(healthy()).values())


def test_findings_quote_the_evidence_and_the_change() -> None:
    lines = findings(
        [healthy(planned_kv_tokens=1000), ModelStatus("gpu-02", "tiny", 8000, error="unreachable")]
    )
    assert lines == [
        "gpu-01/tiny:18200: KV cache 768 tokens is -23.2% off the planned 1,000 (more than 5%)",
        "gpu-01/tiny:18200: "
        + healthy().advice[0].message
        + " [kv_usage_max=0.3478, waiting_max=6, running_max=2, max_num_seqs=2] -> max_num_seqs=4",
        "gpu-02/tiny:8000: unreachable",
    ]


def test_json_keeps_raw_numbers() -> None:
    doc = status_json([healthy(planned_kv_tokens=700), ModelStatus("gpu-02", "tiny", 8000, error="down")])
    assert doc["ok"] is False
    first = doc["entries"][0]
    assert first["ok"] is True
    assert first["metrics"]["requests_waiting"] == 6.0
    assert first["metrics"]["kv_usage"] == pytest.approx(0.3478, abs=1e-4)
    assert first["kv"] == {
        "planned_tokens": 700,
        "measured_tokens": 768,
        "deviation": pytest.approx(68 / 700),
        "off_plan": True,
    }
    assert first["advice"][0]["suggested_args"] == {"max_num_seqs": 4}
    assert first["rates"]["generation_tokens_per_s"] == 726.66
    assert doc["entries"][1]["error"] == "down"
    assert doc["entries"][1]["metrics"] is None


def test_all_healthy_is_ok() -> None:
    assert status_json([healthy(), healthy(host="gpu-02")])["ok"] is True


def test_metrics_without_kv_gauge_show_a_dash() -> None:
    bare = EngineMetrics(engine="sglang", model="m", requests_running=1.0)
    assert status_row(healthy(metrics=bare, planned_kv_tokens=None))["kv_used"] == "-"


def test_preemptions_since_start_beside_their_recent_rate() -> None:
    preempting = replace(QUEUEING, preemptions_total=3.0)
    status = healthy(metrics=preempting, rates=Rates(6.08, 0.329, None, 727.0, 1.64))
    row = status_row(status)
    assert row["preempted"] == "3 (0.33/s)"
    assert row["tokens_per_s"] == "-/727.0"  # no prompt counter in both scrapes: no prompt rate
    assert status_row(healthy(rates=None))["preempted"] == "0 (-)"  # one scrape answered: no rate yet
    assert status_row(healthy(metrics=None, rates=None))["tokens_per_s"] == "-"


def test_the_watch_screen_is_title_table_and_findings() -> None:
    out = io.StringIO()
    Console(file=out, width=250, no_color=True).print(status_screen([healthy()], "round 1"))
    title, header, row, *rest = out.getvalue().splitlines()
    assert title == "round 1" and header.startswith("HOST") and row.startswith("gpu-01")
    assert rest == findings([healthy()])


def test_a_warm_restart_of_a_v2_engine_is_on_plan_up_to_its_restart_figure() -> None:
    # planned 700 tokens for the cold first start, 800 for a restart that loads its compiled graphs
    within = healthy(planned_kv_tokens=700, restart_kv_tokens=800, measured_kv_tokens=790)
    assert within.kv_deviation == 0.0 and not within.kv_off_plan
    above = healthy(planned_kv_tokens=700, restart_kv_tokens=800, measured_kv_tokens=880)
    assert above.kv_deviation == 0.1 and above.kv_off_plan
    below = healthy(planned_kv_tokens=700, restart_kv_tokens=800, measured_kv_tokens=630)
    assert below.kv_deviation == -0.1 and below.kv_off_plan


OWNER = "root@ctl pid=123 since=2026-11-28T03:00:00+00:00 boot=b1 cmd=apply"
NOW = datetime(2026, 11, 28, 3, 4, 12, tzinfo=UTC)


def test_a_held_lock_shows_once_per_host_with_its_owner_and_age() -> None:
    statuses = [healthy(lock=OWNER), healthy(port=18201, lock=OWNER), healthy(host="gpu-02")]
    doc = status_json(statuses, NOW)
    assert doc["locks"] == {
        "gpu-01": {
            "owner": OWNER,
            "user": "root",
            "host": "ctl",
            "pid": 123,
            "command": "apply",
            "since": "2026-11-28T03:00:00+00:00",
            "age_s": 252,
        }
    }
    assert doc["ok"] is True and len(doc["entries"]) == 3  # a lock is shown, not judged
    assert lock_lines(statuses, NOW) == [
        "gpu-01: locked by root@ctl pid=123 (apply) for 4m12s — if that run is gone, the next run on ctl "
        "breaks it (from elsewhere, or after ctl rebooted: --break-lock)"
    ]


def test_without_a_now_the_lock_shows_with_its_age_unknown() -> None:
    assert status_json([healthy(lock="")])["locks"]["gpu-01"]["age_s"] is None
    assert status_json([healthy()])["locks"] == {}


def test_the_watch_screen_shows_a_held_lock_under_the_table() -> None:
    out = io.StringIO()
    statuses = [healthy(lock=OWNER)]
    Console(file=out, width=250, no_color=True).print(status_screen(statuses, "round 1", NOW))
    title, header, row, lock, *rest = out.getvalue().splitlines()
    assert (title, header[:4], row[:6]) == ("round 1", "HOST", "gpu-01")
    assert lock == lock_lines(statuses, NOW)[0] and "for 4m12s" in lock
    assert rest == findings(statuses)
