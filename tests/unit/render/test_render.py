"""Rendering: engine flag spelling, StrictUndefined errors, and no template value breaking its line."""

from __future__ import annotations

import pytest

from vllmctl.render.quoting import unit_exec
from vllmctl.render.templates import RenderError, engine_flags, render_string


def test_engine_flags_spelling() -> None:
    flags = engine_flags({"tensor_parallel_size": 2, "enforce_eager": True, "quantization": None, "x": False})
    assert flags == ["--tensor-parallel-size", "2", "--enforce-eager"]


def test_json_flag_values_are_one_quoted_word() -> None:
    flags = engine_flags({"compilation_config": {"level": 3}})
    assert unit_exec(["/v/python", *flags]) == '/v/python --compilation-config "{\\"level\\":3}"'


def test_strict_undefined_names_the_missing_value() -> None:
    with pytest.raises(RenderError) as caught:
        render_string("User={{ user }}\nPort={{ port }}\n", {"user": "vllm"}, "x.j2")
    assert "port" in caught.value.message and "x.j2" in caught.value.message


def test_syntax_errors_give_the_line() -> None:
    with pytest.raises(RenderError, match=r"x.j2:2"):
        render_string("a\n{% if %}\n", {}, "x.j2")


@pytest.mark.parametrize("value", ["vllm\nExecStartPre=+/bin/sh", "a\rb", "a\0b"])
def test_an_unquoted_value_that_would_start_a_new_line_stops_the_render(value: str) -> None:
    # a template that forgot its filter must not add a setting to a unit run by root
    with pytest.raises(RenderError, match="break its line"):
        render_string("[Service]\nUser={{ user }}\n", {"user": value}, "x.j2")


def test_quoted_values_render_on_one_line() -> None:
    text = render_string("Environment={{ 'A' | unit_env(v) }}\n", {"v": "x\ny"}, "x.j2")
    assert text == 'Environment="A=x\\x0ay"\n'
