"""Jinja2 rendering with StrictUndefined (text in, text out) plus the quoting filters systemd units and
EnvironmentFiles need; templates ship in the repository's templates/ directory."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from vllmctl.errors import VllmctlError

_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")


class RenderError(VllmctlError):
    """A template used a value the context does not have, or is malformed."""


def systemd_quote(word: object) -> str:
    """One ExecStart word: systemd splits on spaces and expands `%` specifiers and `$` variables itself."""
    text = str(word).replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_SAFE.match(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def systemd_exec(argv: Iterable[object]) -> str:
    return " ".join(systemd_quote(word) for word in argv)


def env_quote(value: object) -> str:
    """A value for an EnvironmentFile line: double quotes with backslash escapes, never shell expansion."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def engine_flags(engine_args: Mapping[str, Any]) -> list[str]:
    """`{"tensor_parallel_size": 2, "enforce_eager": True}` -> `["--tensor-parallel-size", "2", ...]`."""
    flags: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            flags.append(flag)
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value, sort_keys=True, separators=(",", ":"))]
        elif isinstance(value, list | tuple):
            flags += [flag, *(str(item) for item in value)]
        else:
            flags += [flag, str(value)]
    return flags


def templates_dir() -> Path:
    """The packaged copy when installed from a wheel, else the repository's templates/ next to the package."""
    packaged = resources.files("vllmctl").joinpath("_shipped", "templates")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "templates"


def _environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(systemd_quote=systemd_quote, systemd_exec=systemd_exec, env_quote=env_quote)
    return env


_ENVIRONMENT = _environment()
_COMPILED: dict[str, jinja2.Template] = {}


def render_string(source: str, context: Mapping[str, Any], name: str = "<string>") -> str:
    """Compiled templates are kept by source text: planning renders the same unit for every host."""
    try:
        template = _COMPILED.get(source)
        if template is None:
            template = _COMPILED[source] = _ENVIRONMENT.from_string(source)
        return template.render(**context)
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template {name}: {exc.message}", "pass that value to the template") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(f"template {name}:{exc.lineno}: {exc.message}", "fix the template syntax") from exc


_SOURCES: dict[str, str] = {}


def render_template(name: str, context: Mapping[str, Any]) -> str:
    if name not in _SOURCES:
        path = templates_dir() / name
        if not path.is_file():
            raise RenderError(f"template {name} not found in {path.parent}", "reinstall vllmctl")
        _SOURCES[name] = path.read_text()
    return render_string(_SOURCES[name], context, name)
