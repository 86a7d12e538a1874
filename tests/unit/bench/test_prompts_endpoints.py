"""Prompts of the asked length (exact with a tokenizer), and the endpoints an inventory serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllmctl.bench.endpoints import endpoints_for
from vllmctl.bench.prompts import WORDS, load_tokenizer, prompt_maker, token_prompts, word_prompts
from vllmctl.errors import InputError
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, ModelDeployment, SshSettings


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("tokenizers")
    from vllmctl.lab.tinymodel import ensure_tiny_model

    return load_tokenizer(ensure_tiny_model(tmp_path_factory.mktemp("models")))


def test_token_prompts_have_exactly_the_asked_token_count_and_differ(tiny_tokenizer: Any) -> None:
    prompts = token_prompts(tiny_tokenizer, 30, 64, seed=3)
    lengths = {len(tiny_tokenizer.encode(p, add_special_tokens=False).ids) for p in prompts}
    assert lengths == {64}
    assert len(set(prompts)) == 30
    assert token_prompts(tiny_tokenizer, 2, 64, seed=3) == prompts[:2]  # reproducible by seed


def test_word_prompts_have_the_asked_word_count_and_differ_by_seed() -> None:
    prompts = word_prompts(5, 20, seed=1)
    assert {len(p.split()) for p in prompts} == {20}
    assert all(word in WORDS for p in prompts for word in p.split())
    assert word_prompts(5, 20, seed=2) != prompts
    assert prompt_maker(20)(5, 1) == prompts


def test_a_missing_tokenizer_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match="cannot read the tokenizer"):
        load_tokenizer(tmp_path)


def _host(name: str, address: str) -> Host:
    return Host(name, address, SshSettings(), None, DriverSpec(), EngineSpec())


INVENTORY = Inventory(
    path="fleet.yml",
    hosts={"a": _host("a", "10.0.0.1"), "b": _host("b", "fd00::2"), "c": _host("c", "gpu-c.lan")},
    groups={},
    models={
        "big": ModelDeployment("big", "org/big", ("a", "b"), port=8000),
        "small": ModelDeployment("small", "/models/small", ("a", "c"), port=9000),
    },
)


def test_endpoints_are_per_host_model_and_replica_at_port_plus_index() -> None:
    found = endpoints_for(INVENTORY, ["a", "b", "c"], replicas={("a", "small"): 3})
    assert [(e.label, e.base_url) for e in found] == [
        ("a/big", "http://10.0.0.1:8000"),
        ("a/small", "http://10.0.0.1:9000"),
        ("a/small#1", "http://10.0.0.1:9001"),
        ("a/small#2", "http://10.0.0.1:9002"),
        ("b/big", "http://[fd00::2]:8000"),
        ("c/small", "http://gpu-c.lan:9000"),
    ]


def test_endpoints_follow_the_chosen_hosts_and_models() -> None:
    assert [e.label for e in endpoints_for(INVENTORY, ["c", "a"], ["small"])] == ["c/small", "a/small"]
    with pytest.raises(InputError, match="no model named 'huge'"):
        endpoints_for(INVENTORY, ["a"], ["huge"])


def test_only_an_absolute_local_source_offers_its_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    model = ModelDeployment("m", str(tmp_path), ("a",))
    inv = Inventory("f", {"a": _host("a", "h")}, {}, {"m": model})
    assert endpoints_for(inv, ["a"])[0].local_tokenizer() == tmp_path / "tokenizer.json"
    assert endpoints_for(INVENTORY, ["a"], ["big"])[0].local_tokenizer() is None


def test_an_endpoint_given_by_url_is_labelled_by_its_model() -> None:
    from vllmctl.bench.endpoints import Endpoint

    assert Endpoint("", "llama", 0, "http://h:1").label == "llama"
