"""The shipped JSON Schemas and how their errors become problems at the YAML line:column.

Messages are written for people: unknown keys get a did-you-mean, wrong types say what was found.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any, Protocol

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from vllmctl.errors import Location, Problem
from vllmctl.inventory.positions import FieldPath, SourceDoc


class Locator(Protocol):
    """Anything that turns a field path into a place in a file: a SourceDoc, or a merged host's Origins."""

    def location(self, path: FieldPath, at_key: bool = False) -> Location: ...


def _whole_number(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 8000.0 as an integer; the port then reaches range() and f"{port}" as a float
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _whole_number)
)

_JSON_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "empty",
}


@cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files("vllmctl.inventory").joinpath(name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def inventory_schema() -> dict[str, Any]:
    """The inventory JSON Schema (Draft 2020-12); a copy, so callers may change it freely."""
    return copy.deepcopy(_load("schema.json"))


def ansible_schema() -> dict[str, Any]:
    """The schema for the parts of an Ansible YAML inventory that vllmctl reads."""
    return copy.deepcopy(_load("ansible-schema.json"))


@cache
def _validator(name: str, definition: str = "") -> Any:
    schema = _load(name)
    if definition:  # one definition of the schema, with the rest there for its references
        schema = {"$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return _Validator(_inlined(schema, schema.get("$defs", {})))


def _inlined(node: Any, defs: dict[str, Any], within: tuple[str, ...] = ()) -> Any:
    """The schema with each plain `{"$ref": "#/$defs/x"}` replaced by x itself (not recursive ones): the
    same checks and messages, and 10,000 hosts checked in ~60% of the time jsonschema's lookups take."""
    if isinstance(node, list):
        return [_inlined(item, defs, within) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if len(node) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in defs and name not in within:
            return _inlined(defs[name], defs, (*within, name))
    return {key: _inlined(value, defs, within) for key, value in node.items()}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint naming the closest choice, or an empty string when nothing is close."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def describe(value: Any) -> str:
    """A short, safe rendering of a found value: its kind, and the value itself when short."""
    if value is None:
        return "nothing (empty value)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    kind = {int: "integer", float: "number", str: "string"}.get(type(value), type(value).__name__)
    shown = repr(value) if isinstance(value, str) else str(value)
    return f"{kind} {shown}" if len(shown) <= 40 else kind


def _expected(types: str | list[str]) -> str:
    names = [types] if isinstance(types, str) else types
    return " or ".join(_JSON_TYPE_WORDS.get(name, name) for name in names if name != "null")


def _type_hint(error: ValidationError) -> str:
    wanted = error.validator_value
    if (
        wanted == "string"
        and isinstance(error.instance, int | float)
        and not isinstance(error.instance, bool)
    ):
        return 'quote it: YAML reads 0.10 as the number 0.1 (write "0.10")'
    if wanted == "integer" and isinstance(error.instance, float) and error.instance.is_integer():
        return f"write it as a whole number: {int(error.instance)}, not {error.instance}"
    if error.instance is None:
        return "give it a value, or remove the key"
    if wanted == "object":
        return "write the settings as `key: value` lines indented under this key"
    return ""


def _problem_for(doc: Locator, error: ValidationError, base: FieldPath) -> list[Problem]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    hint = schema.get("x-hints", {}).get(error.validator)
    problems = _worded(doc, error, base, schema)
    return [Problem(p.location, p.message, hint) for p in problems] if hint else problems


def _worded(doc: Locator, error: ValidationError, base: FieldPath, schema: dict[str, Any]) -> list[Problem]:
    path: FieldPath = (*base, *error.absolute_path)
    kind = error.validator
    # x-messages words one validator's failure (e.g. `not`); x-message words any failure
    custom = schema.get("x-messages", {}).get(kind) or schema.get("x-message")
    wanted: Any = error.validator_value
    if "propertyNames" in error.absolute_schema_path:
        key_path = (*path, str(error.instance))
        message = f"invalid name '{error.instance}': {custom or error.message}"
        return [Problem(doc.location(key_path, at_key=True), message, "rename it")]
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema.get("properties", {}))
        problems = []
        for key in sorted(set(error.instance) - allowed, key=str):
            hint = did_you_mean(key, allowed) or f"allowed keys here: {', '.join(sorted(allowed))}"
            problems.append(Problem(doc.location((*path, key), at_key=True), f"unknown key '{key}'", hint))
        return problems
    if kind == "required":
        missing = str(error.message).split("'")[1] if "'" in error.message else str(error.validator_value)
        return [
            Problem(doc.location(path, at_key=True), f"missing required key '{missing}'", f"add `{missing}:`")
        ]
    if kind == "enum":
        choices = [str(choice) for choice in wanted]
        message = f"must be one of {', '.join(choices)}; got {describe(error.instance)}"
        hint = did_you_mean(str(error.instance), choices) if isinstance(error.instance, str) else ""
        return [Problem(doc.location(path), message, hint or f"pick one of {', '.join(choices)}")]
    if custom:
        # a secret reference, or a value that may carry a password, is never echoed back
        concealed = (
            path[:1] == ("secrets",)
            or schema.get("x-conceal") is True
            or isinstance(error.instance, dict | list)
        )
        found = "" if concealed else f"; got {describe(error.instance)}"
        hint = _type_hint(error) if kind == "type" and "quote" in _type_hint(error) else ""
        return [Problem(doc.location(path), f"{custom}{found}", hint or schema.get("description", ""))]
    if kind == "type":
        message = f"expected {_expected(wanted)}, got {describe(error.instance)}"
        return [Problem(doc.location(path), message, _type_hint(error) or schema.get("description", ""))]
    bounds = {
        "minimum": ">=",
        "maximum": "<=",
        "exclusiveMinimum": ">",
        "exclusiveMaximum": "<",
    }
    if kind in bounds:
        message = f"must be {bounds[kind]} {error.validator_value}, got {describe(error.instance)}"
        return [Problem(doc.location(path), message, schema.get("description", ""))]
    if kind == "minLength":
        return [Problem(doc.location(path), "must not be empty", "give it a value, or remove the key")]
    return [Problem(doc.location(path), str(error.message), "see `vllmctl validate --schema`")]


def schema_problems(doc: SourceDoc, schema_name: str = "schema.json", base: FieldPath = ()) -> list[Problem]:
    """Every schema violation in doc.data, as problems located in doc's file."""
    return _problems(_validator(schema_name).iter_errors(doc.data), doc, base)


def value_problems(value: Any, definition: str, where: Locator) -> list[Problem]:
    """Every violation of one definition of the inventory schema (e.g. "host") by a value read elsewhere."""
    return _problems(_validator("schema.json", definition).iter_errors(value), where, ())


def _problems(errors: Iterable[ValidationError], doc: Locator, base: FieldPath) -> list[Problem]:
    seen: set[tuple[str, str]] = set()
    problems: list[Problem] = []
    for error in sorted(errors, key=lambda e: [str(part) for part in e.absolute_path]):
        for problem in _problem_for(doc, error, base):
            identity = (str(problem.location), problem.message)
            if identity not in seen:
                seen.add(identity)
                problems.append(problem)
    return problems
