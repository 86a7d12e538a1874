"""The fleet's one fan-out: every name gets its answer or its error, in the order given, in parallel."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from vllmctl.errors import TransportError
from vllmctl.inventory import load_inventory
from vllmctl.runner.fleet import hosts as fleet
from vllmctl.runner.fleet.hosts import fan_out, host_contexts, on_each_host


def test_each_name_gets_its_answer_or_its_error_in_the_given_order() -> None:
    def work(name: str) -> str:
        if name == "b":
            raise TransportError("b: unreachable", "check b")
        return name.upper()

    found = fan_out(["c", "b", "a"], work, forks=4)
    assert list(found) == ["c", "b", "a"]
    assert (found["c"], found["a"]) == ("C", "A")
    assert isinstance(found["b"], TransportError) and found["b"].message == "b: unreachable"


def test_names_run_at_once_up_to_forks() -> None:
    barrier = threading.Barrier(3, timeout=10)  # breaks (and fails the test) unless 3 run together
    assert fan_out(["a", "b", "c"], lambda name: barrier.wait() >= 0, forks=3) == {
        "a": True,
        "b": True,
        "c": True,
    }


def test_an_error_other_than_vllmctls_is_raised() -> None:
    with pytest.raises(ZeroDivisionError):
        fan_out(["a"], lambda name: 1 // 0, forks=1)


class _Remote:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self.closed = name, closed

    def close(self) -> None:
        self.closed.append(self.name)


def test_on_each_host_keeps_errors_as_values_and_closes_every_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "inv.yml"
    path.write_text("vllmctl: 1\nhosts:\n  a: {address: 10.0.0.1}\n  b: {address: 10.0.0.2}\n")
    inv = load_inventory(path)
    closed: list[str] = []
    monkeypatch.setattr(fleet, "ssh_remote", lambda ctx: _Remote(ctx.host.name, closed))

    def work(remote: Any) -> dict[str, Any]:
        if remote.name == "b":
            raise TransportError("b: unreachable", "is sshd running?")
        return {"facts": remote.name}

    found = on_each_host(host_contexts(inv, ["a", "b"], {}), work, forks=2)
    assert found == {"a": {"facts": "a"}, "b": {"error": "b: unreachable", "hint": "is sshd running?"}}
    assert sorted(closed) == ["a", "b"]


def test_read_only_contexts_never_read_a_local_model_folder(tmp_path: Path) -> None:
    """status, history, facts, plan and rollback build contexts without hashing what apply would push."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    path = tmp_path / "inv.yml"
    path.write_text(
        "vllmctl: 1\nhosts:\n  a: {address: 10.0.0.1}\n"
        f"models:\n  m: {{source: {model}, hosts: [a], engine_args: {{max_model_len: 128}}}}\n"
    )
    inv = load_inventory(path)
    assert host_contexts(inv, ["a"], {}, stage_models=False)["a"].local_files == {}
    staged = host_contexts(inv, ["a"], {})["a"].local_files[str(model)]
    assert staged is not None and [entry["name"] for entry in staged] == ["config.json"]
