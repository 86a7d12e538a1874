"""Jinja2 rendering with StrictUndefined (text in, text out); every value a template writes goes through a
filter from `vllmctl.render.quoting` for its target. Templates ship in the repository's templates/."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from vllmctl.errors import VllmctlError
from vllmctl.render import quoting


class RenderError(VllmctlError):
    """A template used a value the context does not have, or is malformed."""


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
    return Path(__file__).resolve().parents[2] / "templates"


def _one_line(value: Any) -> Any:
    """Every `{{ }}` of a unit or env file is one line: a value that would start a new one (no filter quoted
    it) stops the render instead of adding a setting."""
    if isinstance(value, str) and any(ch in value for ch in "\n\r\0"):
        raise RenderError(f"a template value would break its line: {value[:60]!r}", "quote it with a filter")
    return value


def _environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        finalize=_one_line,
    )
    env.filters.update(
        unit_exec=quoting.unit_exec,
        unit_env=quoting.unit_environment,
        unit_setting=quoting.unit_setting,
        env_line=quoting.env_file_line,
        haproxy=quoting.haproxy_word,
        keepalived=quoting.keepalived_word,
    )
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
_RENDERED: dict[tuple[str, str], str] = {}
_RENDERED_MAX = 1024
_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    """Data whose repr is its content (no object whose repr is its address, which a new object may reuse)."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def render_template(name: str, context: Mapping[str, Any]) -> str:
    """Identical text is rendered once per run: a fleet's hosts mostly get the same units and env files, and
    each is rendered twice per host (the file itself and the applied hash)."""
    if name not in _SOURCES:
        path = templates_dir() / name
        if not path.is_file():
            raise RenderError(f"template {name} not found in {path.parent}", "reinstall vllmctl")
        _SOURCES[name] = path.read_text()
    items = tuple(context.items())
    if not all(isinstance(k, str) and _plain(v) for k, v in items):
        return render_string(_SOURCES[name], context, name)
    key = (name, repr(items))
    found = _RENDERED.get(key)
    if found is None:
        found = render_string(_SOURCES[name], context, name)
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        _RENDERED[key] = found
    return found
