"""Playbooks: ordered data (phases of named tasks with parameters) loaded and checked before anything runs.

Tasks that are not built yet fail loudly here, at load time, with the issue that tracks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from vllmctl.errors import InvalidInputError, Location, Problem
from vllmctl.tasks import TASKS

PLAYBOOK_KEYS = {"name", "description", "serial", "max_fail_percentage", "phases"}
PHASE_KEYS = {"name", "regather", "tasks"}


@dataclass(frozen=True)
class TaskCall:
    task: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Phase:
    name: str
    tasks: tuple[TaskCall, ...]
    regather: bool = False


@dataclass(frozen=True)
class Playbook:
    name: str
    path: str
    phases: tuple[Phase, ...]
    serial: int | None = None
    max_fail_percentage: float | None = None

    def runs(self, task: str) -> bool:
        """Whether any phase calls `task`."""
        return any(call.task == task for phase in self.phases for call in phase.tasks)


# Names people reach for as playbooks that are commands (rollback needs the host's release history).
COMMANDS_NOT_PLAYBOOKS = {"rollback": "it re-activates a known-good release; see `vllmctl rollback --help`"}


def with_task_params(playbook: Playbook, task: str, params: Mapping[str, Any]) -> Playbook:
    """The playbook with `params` added to every call of `task` (a command-line override of the playbook)."""
    phases = tuple(
        replace(
            phase,
            tasks=tuple(
                replace(t, params={**t.params, **params}) if t.task == task else t for t in phase.tasks
            ),
        )
        for phase in playbook.phases
    )
    return replace(playbook, phases=phases)


def playbooks_dir() -> Path:
    """The packaged copy when installed from a wheel, else the repository's playbooks/ next to the package."""
    packaged = Path(__file__).resolve().parents[1] / "_shipped" / "playbooks"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "playbooks"


def resolve(name_or_path: str) -> Path:
    """A path as given, else a shipped playbook by name (`site`, `site.yml`)."""
    given = Path(name_or_path)
    if given.is_file():
        return given
    shipped = playbooks_dir() / (name_or_path if name_or_path.endswith(".yml") else f"{name_or_path}.yml")
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in playbooks_dir().glob("*.yml")))
    stem = Path(name_or_path).name.removesuffix(".yml")
    if stem in COMMANDS_NOT_PLAYBOOKS:
        message = f"no playbook named {stem}; use `vllmctl {stem}`"
        raise InvalidInputError([Problem(Location(name_or_path), message, COMMANDS_NOT_PLAYBOOKS[stem])])
    raise InvalidInputError(
        [Problem(Location(name_or_path), "no such playbook", f"give a file or one of: {names}")]
    )


def _node_at(node: yaml.Node | None, *keys: str | int) -> yaml.Node | None:
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return node
    return node


class _Checker:
    def __init__(self, path: str, root: yaml.Node | None) -> None:
        self.path, self.root, self.problems = path, root, list[Problem]()

    def add(self, keys: tuple[str | int, ...], message: str, hint: str = "") -> None:
        node = _node_at(self.root, *keys)
        line = node.start_mark.line + 1 if node is not None else None
        column = node.start_mark.column + 1 if node is not None else None
        field_path = ".".join(str(k) for k in keys)
        self.problems.append(Problem(Location(self.path, line, column, field_path), message, hint))


def _task(item: Any, keys: tuple[str | int, ...], check: _Checker) -> TaskCall | None:
    if not isinstance(item, dict) or not isinstance(item.get("task"), str):
        check.add(keys, "each task is a mapping with a `task:` name", "e.g. `- task: base_layout`")
        return None
    name = item["task"]
    if name not in TASKS:
        check.add((*keys, "task"), f"unknown task {name}", f"known tasks: {', '.join(sorted(TASKS))}")
        return None
    return TaskCall(name, {k: v for k, v in item.items() if k != "task"})


def _phase(raw: Any, index: int, check: _Checker) -> Phase | None:
    keys: tuple[str | int, ...] = ("phases", index)
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        check.add(keys, "each phase is a mapping with a `name:`")
        return None
    for extra in sorted(set(raw) - PHASE_KEYS):
        check.add((*keys, extra), f"unknown phase key {extra}", f"allowed: {', '.join(sorted(PHASE_KEYS))}")
    items = raw.get("tasks") or []
    tasks = [_task(item, (*keys, "tasks", i), check) for i, item in enumerate(items)]
    return Phase(raw["name"], tuple(t for t in tasks if t), bool(raw.get("regather", False)))


def parse_playbook(text: str, path: str) -> Playbook:
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InvalidInputError([Problem(Location(path, line), f"not valid YAML: {exc}")]) from exc
    check = _Checker(path, root)
    if not isinstance(data, dict) or not isinstance(data.get("phases"), list):
        check.add((), "a playbook is a mapping with a `phases:` list")
        raise InvalidInputError(check.problems)
    for extra in sorted(set(data) - PLAYBOOK_KEYS):
        check.add((extra,), f"unknown key {extra}", f"allowed: {', '.join(sorted(PLAYBOOK_KEYS))}")
    phases = [_phase(raw, i, check) for i, raw in enumerate(data["phases"])]
    if check.problems:
        raise InvalidInputError(check.problems)
    return Playbook(
        name=str(data.get("name") or Path(path).stem),
        path=path,
        phases=tuple(p for p in phases if p),
        serial=data.get("serial"),
        max_fail_percentage=data.get("max_fail_percentage"),
    )


def load_playbook(name_or_path: str) -> Playbook:
    path = resolve(name_or_path)
    return parse_playbook(path.read_text(), str(path))
