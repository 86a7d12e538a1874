"""Semantic checks the schema cannot express, and the host/group resolution they need.

References, name and port clashes, cycles, and engine flags checked against the flag table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmctl.engine_flags import KNOWN_FLAGS, MANAGED_FLAGS, value_problem
from vllmctl.errors import Problem
from vllmctl.inventory.ansible import AnsibleImport
from vllmctl.inventory.schema import did_you_mean
from vllmctl.inventory.source import FieldPath, SourceDoc
from vllmctl.multinode.checks import check_clusters

MERGED_SECTIONS = ("ssh", "driver", "engine", "vars")
HELP_COMMANDS = {"vllm": "vllm serve --help", "sglang": "python -m sglang.launch_server --help"}
# GPUs one replica uses, per engine: the product of these engine_args (each defaults to 1)
GPU_FACTORS = {
    "vllm": ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"),
    "sglang": ("tp_size", "pp_size", "dp_size"),
}
CONTEXT_FLAGS = {"vllm": "max_model_len", "sglang": "context_length"}
ENGINE_SECRET_HINT = "declare it under `secrets:` ({env: VAR} or {file: PATH}) and write {secret: NAME} here"


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def group_members(raw: Any) -> list[Any]:
    """A group's member names: the list itself, or the `hosts:` of a group written as a mapping."""
    members = raw.get("hosts") if isinstance(raw, dict) else raw
    return members if isinstance(members, list) else []


@dataclass
class Resolved:
    """Hosts with defaults merged in (plain dicts), and groups flattened to host names."""

    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model_hosts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model_clusters: dict[str, str] = field(default_factory=dict)  # model -> the multi_node group it names


def merge_host(name: str, defaults: dict[str, Any], *layers: dict[str, Any]) -> dict[str, Any]:
    """Defaults, then each layer on top; sections merge key by key, other fields are replaced."""
    merged: dict[str, Any] = {"address": name, "gpus": defaults.get("gpus")}
    for section in MERGED_SECTIONS:
        merged[section] = dict(mapping(defaults.get(section)))
    for layer in layers:
        for key, value in layer.items():
            if key in MERGED_SECTIONS:
                merged[key].update(mapping(value))
            else:
                merged[key] = value
    return merged


class Checker:
    def __init__(self, doc: SourceDoc, imported: AnsibleImport) -> None:
        self.doc = doc
        self.data = mapping(doc.data)
        self.imported = imported
        self.problems: list[Problem] = []
        self.resolved = Resolved()

    def add(self, path: FieldPath, message: str, hint: str, at_key: bool = False) -> None:
        problem = Problem(self.doc.location(path, at_key), message, hint)
        if problem not in self.problems:  # nested groups are walked once per group that includes them
            self.problems.append(problem)

    def run(self) -> Resolved:
        self.merge_hosts()
        self.resolve_groups()
        for name, model in mapping(self.data.get("models")).items():
            if isinstance(model, dict):
                self.resolved.model_hosts[name] = self.model_hosts(name, model)
                self.engine_args(name, model)
                self.gpu_fit(name, model)
        self.port_clashes()
        check_clusters(self)
        return self.resolved

    def merge_hosts(self) -> None:
        defaults = mapping(self.data.get("defaults"))
        native = {name: mapping(body) for name, body in mapping(self.data.get("hosts")).items()}
        for name in [*self.imported.hosts, *(n for n in native if n not in self.imported.hosts)]:
            layers = [self.imported.hosts.get(name, {}), native.get(name, {})]
            self.resolved.hosts[name] = merge_host(name, defaults, *layers)

    def resolve_groups(self) -> None:
        native = mapping(self.data.get("groups"))
        for name in native:
            if name in self.resolved.hosts:
                self.add(("groups", name), f"group '{name}' has the same name as a host", "rename one", True)
            elif name in self.imported.groups:
                hint = "rename the group here, or drop it and use the Ansible one"
                self.add(
                    ("groups", name), f"group '{name}' is also defined by the Ansible inventory", hint, True
                )
        groups: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in self.imported.groups.items()}
        for name in native:
            groups[name] = self.expand_group(name, native, ())
            cycle = find_cycle(name, native)
            if cycle:
                message = f"group '{name}' includes itself: {' → '.join(cycle)}"
                self.add(("groups", name), message, "remove one of the group references", True)
        self.resolved.groups = {k: v for k, v in groups.items() if k not in self.resolved.hosts}

    def expand_group(self, name: str, native: dict[str, Any], seen: tuple[str, ...]) -> tuple[str, ...]:
        members: list[str] = []
        raw = native.get(name)
        for index, member in enumerate(group_members(raw)):
            if not isinstance(member, str):
                continue
            path = ("groups", name, "hosts", index) if isinstance(raw, dict) else ("groups", name, index)
            if member in self.resolved.hosts:
                found: tuple[str, ...] = (member,)
            elif member in native:
                if member in seen or member == name:
                    continue  # a cycle, reported once per group by find_cycle
                found = self.expand_group(member, native, (*seen, name))
            elif member in self.imported.groups:
                found = tuple(self.imported.groups[member])
            else:
                choices = {*self.resolved.hosts, *native, *self.imported.groups}
                self.add(
                    path, f"unknown host or group '{member}'", did_you_mean(member, choices) or "define it"
                )
                continue
            members.extend(host for host in found if host not in members)
        return tuple(members)

    def model_hosts(self, name: str, model: dict[str, Any]) -> tuple[str, ...]:
        selectors = model.get("hosts")
        items = (
            [selectors] if isinstance(selectors, str) else selectors if isinstance(selectors, list) else None
        )
        if items is None:
            return ()
        hosts: list[str] = []
        for index, selector in enumerate(items):
            path: FieldPath = (
                ("models", name, "hosts", index) if isinstance(selectors, list) else ("models", name, "hosts")
            )
            if not isinstance(selector, str):
                continue
            if selector in self.resolved.hosts:
                found: tuple[str, ...] = (selector,)
            elif selector in self.resolved.groups:
                found = self.resolved.groups[selector]
            else:
                choices = {*self.resolved.hosts, *self.resolved.groups}
                self.add(
                    path,
                    f"unknown host or group '{selector}'",
                    did_you_mean(selector, choices) or "define it",
                )
                continue
            hosts.extend(host for host in found if host not in hosts)
        if not hosts and not any(p.location.path.startswith(f"models.{name}.hosts") for p in self.problems):
            self.add(
                ("models", name, "hosts"), f"model '{name}' resolves to no hosts", "add hosts to the group"
            )
        return tuple(hosts)

    def engines_for(self, name: str, model: dict[str, Any]) -> list[str]:
        override = mapping(model.get("engine")).get("name")
        if isinstance(override, str):
            return [override] if override in KNOWN_FLAGS else []
        hosts = self.resolved.model_hosts.get(name, ())
        names = {str(self.resolved.hosts[host]["engine"].get("name", "vllm")) for host in hosts}
        if not hosts:
            names = {str(mapping(mapping(self.data.get("defaults")).get("engine")).get("name", "vllm"))}
        return sorted(names & set(KNOWN_FLAGS))

    def engine_args(self, name: str, model: dict[str, Any]) -> None:
        args = mapping(model.get("engine_args"))
        secrets = mapping(self.data.get("secrets"))
        for engine in self.engines_for(name, model):
            flags = KNOWN_FLAGS[engine]
            for flag, value in args.items():
                path = ("models", name, "engine_args", flag)
                if flag in MANAGED_FLAGS:
                    hint = f"set it with models.{name}.{MANAGED_FLAGS[flag]}"
                    if flag == "host":
                        hint = MANAGED_FLAGS[flag]
                    self.add(path, f"'{flag}' is set by vllmctl, not engine_args", hint, True)
                elif flag not in flags:
                    snake = flag.replace("-", "_").lstrip("_")
                    hint = (
                        f"engine_args use snake_case: '{snake}'"
                        if snake in flags
                        else did_you_mean(flag, flags)
                    )
                    self.add(
                        path,
                        f"unknown {engine} flag '{flag}'",
                        hint or f"see `{HELP_COMMANDS[engine]}`",
                        True,
                    )
                elif (why := value_problem(flags[flag], value)) is not None:
                    shown = "" if flags[flag].secret else f", got {_short(value)}"
                    hint = (
                        ENGINE_SECRET_HINT
                        if flags[flag].secret
                        else f"{engine} flag --{flag.replace('_', '-')}"
                    )
                    self.add(path, f"{why}{shown}", hint)
                elif flags[flag].secret and value["secret"] not in secrets:
                    ref = str(value["secret"])
                    self.add(
                        path,
                        f"unknown secret '{ref}'",
                        did_you_mean(ref, set(secrets)) or "add it under secrets:",
                    )

    def gpu_fit(self, name: str, model: dict[str, Any]) -> None:
        """Parallelism that needs more GPUs than a host declares, and two different context lengths."""
        args = mapping(model.get("engine_args"))
        for engine in self.engines_for(name, model):
            flag_name, context, length = (
                CONTEXT_FLAGS[engine],
                args.get(CONTEXT_FLAGS[engine]),
                model.get("max_model_len"),
            )
            if isinstance(length, int) and isinstance(context, int) and context != length:
                self.add(
                    ("models", name, "engine_args", flag_name),
                    f"{flag_name} {context} differs from models.{name}.max_model_len {length}",
                    f"set the context length once, with models.{name}.max_model_len",
                )
            factors = [(flag, args.get(flag, 1)) for flag in GPU_FACTORS[engine]]
            if engine == "sglang" and args.get("enable_dp_attention") is True:
                factors = factors[:2]  # with DP attention the dp ranks share the tp GPUs
            if not all(isinstance(value, int) and not isinstance(value, bool) for _, value in factors):
                continue
            needed = 1
            for _, value in factors:
                needed *= value
            if needed == 1:
                continue
            for host in self.resolved.model_hosts.get(name, ()):
                gpus = mapping(self.resolved.hosts[host].get("gpus"))
                count = gpus.get("count")
                if isinstance(count, int) and 1 <= count < needed:
                    used = " × ".join(
                        f"{flag} {value}" for flag, value in factors if args.get(flag) is not None
                    )
                    self.add(
                        ("models", name, "engine_args"),
                        f"needs {needed} GPUs ({used}) but host '{host}' declares {count}",
                        "lower the parallelism, or serve the model on hosts with more GPUs",
                        True,
                    )
                    break

    def port_clashes(self) -> None:
        taken: dict[tuple[str, int], str] = {}
        for name, hosts in self.resolved.model_hosts.items():
            port = mapping(mapping(self.data.get("models")).get(name)).get("port", 8000)
            if not isinstance(port, int):
                continue
            for host in hosts:
                other = taken.setdefault((host, port), name)
                if other != name:
                    self.add(
                        ("models", name, "port"),
                        f"port {port} on host '{host}' is already used by model '{other}'",
                        "give each model on a host its own port",
                    )
                    break


def find_cycle(start: str, native: dict[str, Any]) -> list[str] | None:
    """The group names on a path from start back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    visited: set[str] = set()
    while stack:
        name, trail = stack.pop()
        for member in group_members(native.get(name)):
            if member == start:
                return [*trail, start]
            if isinstance(member, str) and member in native and member not in visited:
                visited.add(member)
                stack.append((member, [*trail, member]))
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
