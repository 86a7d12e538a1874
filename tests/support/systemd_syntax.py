"""A reference reader of what systemd makes of a unit file and an EnvironmentFile, written from systemd 252's
rules (systemd.syntax(7) "Quoting", systemd.service(5) "Command lines", systemd.exec(5) Environment= and
EnvironmentFile=; src/basic/extract-word.c, src/basic/env-file.c). The quoting tests parse what vllmctl
renders back with it; the lab test checks the same texts against a real systemd."""

from __future__ import annotations

import re

WHITESPACE = " \t\n\r"
NEWLINE = "\n\r"
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_SIMPLE_ESCAPES |= {"\\": "\\", '"': '"', "'": "'", "s": " "}


class Unsafe(Exception):
    """The text would make systemd do something other than take the value literally."""


def _cunescape_one(text: str, i: int) -> tuple[str, int]:
    """The character an escape at text[i] (after the backslash) stands for, and the index after it."""
    ch = text[i]
    if ch in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[ch], i + 1
    if ch == "x":
        code = int(text[i + 1 : i + 3], 16)
        if code == 0:
            raise Unsafe("\\x00")
        return chr(code), i + 3
    if ch in "uU":
        width = 4 if ch == "u" else 8
        return chr(int(text[i + 1 : i + 1 + width], 16)), i + 1 + width
    if ch in "01234567":
        return chr(int(text[i : i + 3], 8)), i + 3
    raise Unsafe(f"invalid escape \\{ch}")


def extract_words(text: str, separators: bool = False) -> list[str]:
    """extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE) to the end: quotes may start anywhere in a word,
    backslash escapes apply inside and outside quotes, whitespace outside quotes separates words."""
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in WHITESPACE:
            i += 1
        if i >= n:
            return words
        if separators and text[i] == ";" and (i + 1 == n or text[i + 1] in WHITESPACE):
            raise Unsafe("command separator ;")  # systemd checks the raw text where each word starts
        word, quote = "", ""
        while i < n:
            ch = text[i]
            if ch == "\\":
                if i + 1 >= n:
                    raise Unsafe("trailing backslash")
                value, i = _cunescape_one(text, i + 1)
                word += value
                continue
            if quote:
                if ch == quote:
                    quote = ""
                else:
                    word += ch
            elif ch in "'\"":
                quote = ch
            elif ch in WHITESPACE:
                break
            else:
                word += ch
            i += 1
        if quote:
            raise Unsafe("unterminated quote")
        words.append(word)


def resolve_specifiers(text: str) -> str:
    """`%%` is a literal percent; any other `%x` would be replaced by systemd."""
    out, i = "", 0
    while i < len(text):
        if text[i] == "%":
            if text[i + 1 : i + 2] != "%":
                raise Unsafe(f"specifier %{text[i + 1 : i + 2]}")
            out += "%"
            i += 2
        else:
            out += text[i]
            i += 1
    return out


def exec_argv(value: str) -> list[str]:
    """An ExecStart= value as the argv systemd executes; any `$` expansion or command separator is Unsafe."""
    words = extract_words(resolve_specifiers(value), separators=True)
    if words and words[0][:1] in "-@:+!":
        raise Unsafe(f"ExecStart prefix {words[0][:1]}")
    argv = []
    for word in words:
        # `$$` is a literal dollar; `$NAME` as a word and `${NAME}` anywhere are expanded at exec time
        parts = word.split("$$")
        if any("$" in part for part in parts):
            raise Unsafe(f"expansion in {word!r}")
        argv.append("$".join(parts))
    return argv


def environment_assignments(value: str) -> dict[str, str]:
    """An Environment= value: specifiers, then words; `$` means nothing there."""
    found = {}
    for word in extract_words(resolve_specifiers(value)):
        name, sep, rest = word.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise Unsafe(f"invalid assignment {word!r}")
        found[name] = rest
    return found


def unit_settings(text: str) -> list[tuple[str, str, str]]:
    """(section, key, raw value) per setting: lines end at LF or CR, a trailing backslash continues a line,
    `#`/`;` lines are comments."""
    settings: list[tuple[str, str, str]] = []
    section = ""
    lines = re.split(r"\r\n|\n|\r", text)
    i = 0
    while i < len(lines):
        line = lines[i].strip(WHITESPACE)
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip(WHITESPACE)
            i += 1
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise Unsafe(f"not an assignment: {line!r}")
        settings.append((section, key.strip(WHITESPACE), value.strip(WHITESPACE)))
    return settings


def env_file(text: str) -> list[tuple[str, str]]:
    """(name, value) per assignment, as systemd's parse_env_file_internal reads an EnvironmentFile."""
    pairs: list[tuple[str, str]] = []
    state, key, value = "pre_key", "", ""
    trailing_ws = 0  # unescaped whitespace at the end of an unquoted value, dropped

    def emit() -> None:
        nonlocal key, value, trailing_ws
        pairs.append((key.rstrip(WHITESPACE), value[: len(value) - trailing_ws] if trailing_ws else value))
        key, value, trailing_ws = "", "", 0

    for ch in text:
        if state == "pre_key":
            if ch in "#;":
                state = "comment"
            elif ch not in WHITESPACE:
                state, key = "key", ch
        elif state == "key":
            if ch in NEWLINE:
                state, key = "pre_key", ""
            elif ch == "=":
                state, value, trailing_ws = "pre_value", "", 0
            else:
                key += ch
        elif state == "pre_value":
            if ch in NEWLINE:
                state = "pre_key"
                emit()
            elif ch == "'":
                state = "single"
            elif ch == '"':
                state = "double"
            elif ch == "\\":
                state = "value_escape"
            elif ch not in WHITESPACE:
                state, value, trailing_ws = "value", value + ch, 0
        elif state == "value":
            if ch in NEWLINE:
                state = "pre_key"
                emit()
            elif ch == "\\":
                state = "value_escape"
            else:
                value += ch
                trailing_ws = trailing_ws + 1 if ch in WHITESPACE else 0
        elif state == "value_escape":
            state, trailing_ws = "value", 0
            if ch not in NEWLINE:
                value += ch
        elif state == "single":
            if ch == "'":
                state = "pre_value"
            else:
                value += ch
        elif state == "double":
            if ch == '"':
                state = "pre_value"
            elif ch == "\\":
                state = "double_escape"
            else:
                value += ch
        elif state == "double_escape":
            state = "double"
            if ch in '"\\`$':
                value += ch
            elif ch != "\n":
                value += "\\" + ch
        elif state == "comment" and ch in NEWLINE:
            state = "pre_key"
    if state in ("pre_value", "value", "value_escape"):
        emit()
    elif state in ("single", "double", "double_escape"):
        raise Unsafe("unterminated quote at the end of the env file")
    return pairs
