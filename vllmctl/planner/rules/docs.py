"""The startup rules as a Markdown table for docs/planner.md (a test keeps the page and the rules in step)."""

from __future__ import annotations

from vllmctl.planner.rules import RULES


def rules_markdown() -> str:
    lines = [
        "| rule | what vLLM checks | where (vLLM 0.11.0) | versions | flags |",
        "|---|---|---|---|---|",
    ]
    for rule in RULES:
        flags = ", ".join(f"`{flag}`" for flag in rule.flags)
        lines.append(f"| `{rule.name}` | {rule.summary} | {rule.source} | {rule.versions} | {flags} |")
    return "\n".join(lines) + "\n"
