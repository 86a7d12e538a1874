"""Scans every string in a parsed file for control characters and for secrets written in as literals.

Values reach shell commands and unit files; secrets belong in `secrets:` as references, never as values.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

from vllmctl.errors import Problem
from vllmctl.inventory.source import FieldPath, SourceDoc, VaultValue

TOKEN_PATTERNS = {
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "OpenAI-style API key": re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
    "GitHub token": re.compile(r"\b(ghp_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"),
    "AWS access key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
}
SECRET_KEY_NAME = re.compile(r"(token|password|passwd|secret|api_?key|private_key)$", re.IGNORECASE)
SECRET_HINT = "move it to `secrets:` as {env: VAR} or {file: PATH} and reference that instead"


_CONTROL_NAMES = {"\n": "newline", "\r": "carriage return", "\t": "tab", "\x1b": "escape", "\x00": "NUL"}


def _control_char(text: str) -> str | None:
    for char in text:
        if unicodedata.category(char) == "Cc":
            return f"U+{ord(char):04X} {_CONTROL_NAMES.get(char, 'control character')}"
    return None


def scan_strings(
    doc: SourceDoc, ignored: Callable[[str], bool] = lambda key: False, vault_ok: bool = False
) -> list[Problem]:
    """Control characters and literal secrets anywhere in a file, keys and values alike.

    Keys for which `ignored` is true are skipped with their values (settings vllmctl never reads);
    with vault_ok, Ansible Vault values are skipped too (the Ansible import drops them).
    """
    problems: list[Problem] = []

    def visit(value: Any, path: FieldPath) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if ignored(key):
                    continue
                if (char := _control_char(key)) is not None:
                    problems.append(
                        Problem(
                            doc.location((*path, key), True),
                            f"key contains a control character ({char})",
                            "remove it",
                        )
                    )
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
            if (char := _control_char(value)) is not None:
                message = (
                    f"value contains a control character ({char}); values reach shell commands and unit files"
                )
                problems.append(
                    Problem(doc.location(path), message, "remove it; put multi-line text in a file")
                )
            if len(path) == 2 and path[0] == "secrets":
                return  # the schema already says a secret entry must be a reference
            for kind, pattern in TOKEN_PATTERNS.items():
                if pattern.search(value):
                    problems.append(
                        Problem(doc.location(path), f"looks like a literal secret ({kind})", SECRET_HINT)
                    )
                    break

    visit(doc.data, ())
    return problems


def _may_hold_literal(path: FieldPath) -> bool:
    # engine_args secrets are checked against the flag table; `secrets:` entries by the schema
    return not (
        path[:1] == ("secrets",) or (len(path) >= 4 and path[0] == "models" and path[2] == "engine_args")
    )
