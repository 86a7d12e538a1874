"""A model's rollout bounds in the inventory: max_unavailable as a count or a percentage, the canary, their
defaults (one host at a time, as before), and each wrong value reported at its file, line and field."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import CanarySpec
from vllmctl.releases.waves import MaxUnavailable, RolloutLimits

Problems = Callable[..., list[str]]
HEAD = """\
vllmctl: 1
hosts: {a: {address: 10.0.0.1}, b: {address: 10.0.0.2}, c: {address: 10.0.0.3}}
models:
"""


def test_defaults_keep_one_host_at_a_time(workdir: Path) -> None:
    (workdir / "inv.yml").write_text(HEAD + "  m: {source: org/m, hosts: [a, b, c]}\n")
    model = load_inventory("inv.yml").models["m"]
    assert model.max_unavailable is None and model.canary == CanarySpec(None, 0.0)
    assert model.limits == RolloutLimits(1, None, 1, 0.0, 0.01, 1.5, canary_holds=False)
    # the first host goes alone, but its failure stops the rollout only past --max-fail
    assert model.limits.max_out(3) == 1


def test_min_available_0_alone_still_restarts_every_host_at_once(workdir: Path) -> None:
    (workdir / "inv.yml").write_text(HEAD + "  m: {source: org/m, hosts: [a, b, c], min_available: 0}\n")
    limits = load_inventory("inv.yml").models["m"].limits
    assert limits.canary == 0 and limits.max_out(3) == 3


def test_a_count_a_percentage_and_a_canary_are_read(workdir: Path) -> None:
    body = """\
      m: {source: org/m, hosts: [a, b, c], max_unavailable: 2, canary: {hosts: 1, soak_s: 30}}
      n: {source: org/n, hosts: [a, b, c], port: 8100, max_unavailable: 50%, canary: {hosts: 0}}
    """
    (workdir / "inv.yml").write_text(HEAD + textwrap.indent(textwrap.dedent(body), "  "))
    models = load_inventory("inv.yml").models
    assert models["m"].limits == RolloutLimits(1, MaxUnavailable(2), 1, 30.0)
    assert models["n"].limits == RolloutLimits(1, MaxUnavailable(0, 50.0), 0, 0.0)


def test_wrong_values_are_reported_where_they_were_written(problems: Problems) -> None:
    found = problems(
        HEAD
        + "  m: {source: org/m, hosts: [a, b, c], max_unavailable: 0}\n"
        + "  n: {source: org/n, hosts: [a, b], max_unavailable: 150%, canary: {hosts: 2, soak: 3}}\n"
        + "  o: {source: org/o, hosts: [a, b], max_unavailable: '1.5'}\n"
    )
    assert found[0].startswith("inv.yml:4:") and "models.m.max_unavailable" in found[0]
    assert "1 or more" in found[0]
    assert any(p.startswith("inv.yml:5:") and "models.n.max_unavailable" in p for p in found)
    assert any(p.startswith("inv.yml:5:") and "models.n.canary.soak: unknown key" in p for p in found)
    assert any(p.startswith("inv.yml:6:") and "models.o.max_unavailable" in p for p in found)


def test_a_canary_of_every_host_leaves_none_to_follow(problems: Problems) -> None:
    assert problems(HEAD + "  m: {source: org/m, hosts: [a, b], canary: {hosts: 2}}\n") == [
        "inv.yml:4:53: models.m.canary.hosts: a canary of 2 host(s) is every one of the model's 2 hosts: "
        "none is left to follow it\n"
        "  hint: give canary.hosts fewer than 2 (1 is the default), or 0 for no canary"
    ]
