"""Scans every key and value in a parsed file: unprintable characters, secrets written in as literals
(tokens, URLs with a password), integers beyond 64 bits and NaN or infinity.

Values reach shell commands, unit files and env files; secrets belong in `secrets:` as references.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from vllmctl.errors import Problem
from vllmctl.inventory.positions import FieldPath, SourceDoc, VaultValue, unprintable

TOKEN_PATTERNS = {
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "OpenAI-style API key": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
    "GitHub token": re.compile(r"\b(ghp_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"),
    "AWS access key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "URL with a password": re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s@:]*:[^/\s@]*@"),
}
SECRET_KEY_NAME = re.compile(r"(token|password|passwd|secret|api_?key|private_key)$", re.IGNORECASE)
SECRET_HINT = "move it to `secrets:` as {env: VAR} or {file: PATH} and reference that instead"
INT64 = (-(2**63), 2**63 - 1)
# URL fields whose schema already refuses any user:password@, with a hint that names their credentials field
SCHEMA_CHECKED_URLS = {"index_url"}

_CHAR_NAMES = {"\n": "newline", "\r": "carriage return", "\t": "tab", "\x1b": "escape", "\x00": "NUL"}


def _unprintable_char(text: str) -> str | None:
    for char in text:
        if unprintable(char):
            name = _CHAR_NAMES.get(char) or unicodedata.name(char, "control character").lower()
            return f"U+{ord(char):04X} {name}"
    return None


def _number_problem(value: Any, path: FieldPath) -> tuple[str, str] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        return "integer does not fit in 64 bits", "no setting needs a number this large; check for a typo"
    if isinstance(value, float) and not math.isfinite(value) and not _engine_flag_value(path):
        return f"{value} is not a number vllmctl accepts here", "write a finite number"
    return None


def _engine_flag_value(path: FieldPath) -> bool:
    # a flag's own value is checked against the flag table, which words its problem for that flag
    return len(path) == 4 and path[0] == "models" and path[2] == "engine_args"


def scan_strings(
    doc: SourceDoc, ignored: Callable[[str], bool] = lambda key: False, vault_ok: bool = False
) -> list[Problem]:
    """Unprintable characters, literal secrets and out-of-range numbers anywhere in a file.

    Keys for which `ignored` is true are skipped with their values (settings vllmctl never reads);
    with vault_ok, Ansible Vault values are skipped too (the Ansible import drops them).
    """
    problems: list[Problem] = []

    def visit(value: Any, path: FieldPath) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if ignored(key):
                    continue
                if (char := _unprintable_char(key)) is not None:
                    message = f"key contains a control character ({char})"
                    problems.append(Problem(doc.location((*path, key), True), message, "remove it"))
                key_path = (*path, key)
                if (
                    isinstance(item, str)
                    and not isinstance(item, VaultValue)
                    and item
                    and SECRET_KEY_NAME.search(key)
                    and _may_hold_literal(key_path)
                ):
                    message = f"'{key}' holds a literal secret"
                    problems.append(Problem(doc.location(key_path), message, SECRET_HINT))
                else:
                    visit(item, key_path)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                visit(item, (*path, index))
        elif isinstance(value, VaultValue):
            if vault_ok:
                return
            hint = "vllmctl does not decrypt Ansible Vault; declare the secret under `secrets:` instead"
            problems.append(Problem(doc.location(path), "an Ansible Vault value cannot be used here", hint))
        elif isinstance(value, str):
            problems.extend(_string_problems(doc, value, path))
        elif (found := _number_problem(value, path)) is not None:
            problems.append(Problem(doc.location(path), *found))

    visit(doc.data, ())
    return problems


def _string_problems(doc: SourceDoc, value: str, path: FieldPath) -> list[Problem]:
    problems = []
    if (char := _unprintable_char(value)) is not None:
        message = f"value contains a control character ({char}); values reach shell commands and unit files"
        problems.append(Problem(doc.location(path), message, "remove it; put multi-line text in a file"))
    if len(path) == 2 and path[0] == "secrets":
        return problems  # the schema already says a secret entry must be a reference
    for kind, pattern in TOKEN_PATTERNS.items():
        if kind == "URL with a password" and path[-1:] and path[-1] in SCHEMA_CHECKED_URLS:
            continue
        if pattern.search(value):
            problems.append(Problem(doc.location(path), f"looks like a literal secret ({kind})", SECRET_HINT))
            break
    return problems


def _may_hold_literal(path: FieldPath) -> bool:
    # engine_args secrets are checked against the flag table; `secrets:` entries and references by the schema
    return not (
        path[:1] == ("secrets",)
        or (len(path) >= 4 and path[0] == "models" and path[2] == "engine_args")
        or path[-2:] == ("index_credentials", "secret")
    )
