"""Rendering: systemd quoting of engine argv, env-file quoting, and StrictUndefined errors."""

from __future__ import annotations

import shlex

import pytest

from vllmctl.render import RenderError, engine_flags, env_quote, render_string, systemd_exec, systemd_quote


def _systemd_split(line: str) -> list[str]:
    """A reference splitter for what systemd does with an ExecStart line (quotes, \\ escapes, %%, $$)."""
    words, word, quote, i, started = [], "", "", 0, False
    escapes = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
                word += escapes[line[i]]
            elif ch == quote:
                quote = ""
            else:
                word += ch
        elif ch in "\"'":
            quote, started = ch, True
        elif ch == " ":
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + ch, True
        i += 1
    if started:
        words.append(word)
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def test_model_path_with_spaces_and_shell_metacharacters_survives_systemd_splitting() -> None:
    argv = ["/opt/v/bin/python", "-m", "vllm", "--model", '/srv/my models/it\'s $HOME; rm -rf / `x` 100% "q"']
    line = systemd_exec(argv)
    assert _systemd_split(line) == argv
    assert "$$HOME" in line and "100%%" in line


def test_plain_words_are_left_bare() -> None:
    assert systemd_exec(["--port", "8000", "--model", "org/Model-7B"]) == "--port 8000 --model org/Model-7B"


def test_empty_and_json_words_are_quoted() -> None:
    assert systemd_quote("") == '""'
    flags = engine_flags({"compilation_config": {"level": 3}})
    assert systemd_exec(flags) == '--compilation-config "{\\"level\\":3}"'


def test_engine_flags_spelling() -> None:
    flags = engine_flags({"tensor_parallel_size": 2, "enforce_eager": True, "quantization": None, "x": False})
    assert flags == ["--tensor-parallel-size", "2", "--enforce-eager"]


def test_env_values_are_double_quoted_with_escapes_not_shell_expanded() -> None:
    assert env_quote('a "b" \\ $X') == '"a \\"b\\" \\\\ $X"'


def test_strict_undefined_names_the_missing_value() -> None:
    with pytest.raises(RenderError) as caught:
        render_string("User={{ user }}\nPort={{ port }}\n", {"user": "vllm"}, "x.j2")
    assert "port" in caught.value.message and "x.j2" in caught.value.message


def test_syntax_errors_give_the_line() -> None:
    with pytest.raises(RenderError, match=r"x.j2:2"):
        render_string("a\n{% if %}\n", {}, "x.j2")


def test_shlex_is_not_systemd_quoting() -> None:
    # shell quoting would leave $ and % for systemd to expand: the two differ on purpose
    assert systemd_quote("$HOME") != shlex.quote("$HOME")
