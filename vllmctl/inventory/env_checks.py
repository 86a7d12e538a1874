"""Env-file names: secrets (written as their name in upper case) and each host's `vars.env`; secrets scoped
to models; and the package index's credentials.

A model's env file holds vars.env, then its secrets: two names that meet in upper case would silently
replace one another, so they are refused.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from vllmctl.inventory.env_names import reserved_env_problem
from vllmctl.inventory.resolve import mapping
from vllmctl.inventory.schema import did_you_mean

if TYPE_CHECKING:
    from vllmctl.errors import Location
    from vllmctl.inventory.positions import FieldPath
    from vllmctl.inventory.resolve import Checker

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # the schema's env_name; other names it reports
# vLLM's envs.py reads these as bool(int(value)): any other value stops the engine at start.
READ_AS_INTEGER = ("VLLM_USE_V2_MODEL_RUNNER", "VLLM_USE_FLASHINFER_SAMPLER")


def check_env(checker: Checker) -> None:
    check_secrets(checker)
    check_host_env(checker)
    check_index_credentials(checker)


def secret_scope(body: Any) -> list[str] | None:
    """The models a secret goes to; None means every model."""
    scope = mapping(body).get("models")
    return [str(name) for name in scope] if isinstance(scope, list) else None


def check_secrets(checker: Checker) -> None:
    models = mapping(checker.data.get("models"))
    first: dict[str, str] = {}
    for name, body in mapping(checker.data.get("secrets")).items():
        if not ENV_NAME.match(name):
            continue
        path = ("secrets", name)
        if (found := reserved_env_problem(name)) is not None:
            checker.add(path, f"secret '{name}': {found.message}", f"rename the secret; {found.hint}", True)
        other = first.setdefault(name.upper(), name)
        if other != name:
            message = f"secrets '{other}' and '{name}' both become {name.upper()} in the env file"
            checker.add(path, message, "rename one of them: env file names are upper case", True)
        for index, model in enumerate(secret_scope(body) or []):
            if model not in models:
                hint = did_you_mean(model, set(models)) or "list models defined under `models:`"
                checker.add((*path, "models", index), f"unknown model '{model}'", hint)


def _secrets_on(checker: Checker, host: str) -> dict[str, str]:
    """Upper-case env name -> secret name, for the secrets that reach some model on this host."""
    served = checker.models_of(host)
    found: dict[str, str] = {}
    for name, body in mapping(checker.data.get("secrets")).items():
        scope = secret_scope(body)
        if served and (scope is None or set(scope) & set(served)):
            found.setdefault(name.upper(), name)
    return found


def _written_env(checker: Checker) -> list[tuple[str, Location]]:
    """Every vars.env name as written (defaults, hosts, Ansible hosts), even one a later layer hides."""
    found: list[tuple[str, Location]] = []
    native: list[tuple[FieldPath, dict[str, Any]]] = [(("defaults",), mapping(checker.data.get("defaults")))]
    native += [(("hosts", name), mapping(body)) for name, body in mapping(checker.data.get("hosts")).items()]
    for base, layer in native:
        for name in mapping(mapping(layer.get("vars")).get("env")):
            found.append((name, checker.doc.location((*base, "vars", "env", name), at_key=True)))
    for host, settings in checker.imported.hosts.items():
        origins = checker.imported.origins[host]
        for name in mapping(mapping(settings.get("vars")).get("env")):
            found.append((name, origins.location(("vars", "env", name), at_key=True)))
    return found


def check_host_env(checker: Checker) -> None:
    for name, where in _written_env(checker):
        if (
            isinstance(name, str)
            and ENV_NAME.match(name)
            and (found := reserved_env_problem(name)) is not None
        ):
            checker.add_at(where, f"vars.env '{name}': {found.message}", found.hint)
    for host, merged in checker.resolved.hosts.items():
        env = mapping(mapping(merged.get("vars")).get("env"))
        secrets = _secrets_on(checker, host)
        first: dict[str, str] = {}
        for name in env:
            if not isinstance(name, str) or not ENV_NAME.match(name):
                continue
            where = checker.where(host, ("vars", "env", name), at_key=True)
            other = first.setdefault(name.upper(), name)
            if other != name:
                message = f"vars.env '{name}' and '{other}' differ only in case"
                checker.add_at(where, message, "keep one: the engine would see both, and people one")
            value = env[name]
            if name in READ_AS_INTEGER and not re.fullmatch(r"\s*[+-]?\d+\s*", str(value)):
                checker.add_at(
                    checker.where(host, ("vars", "env", name)),
                    f"vars.env {name}={value!r} stops vLLM at start: it reads the value as an integer",
                    "set it to 1 or 0, or leave it out for vLLM's own choice",
                )
            if name.upper() in secrets:
                secret = secrets[name.upper()]
                message = (
                    f"vars.env '{name}' is also the env name of secret '{secret}', which would replace it"
                )
                checker.add_at(where, message, f"remove it from vars.env, or rename secret '{secret}'")


def check_index_credentials(checker: Checker) -> None:
    """`index_credentials` names a secret, and goes with an `index_url` in the same engine settings."""
    secrets = mapping(checker.data.get("secrets"))
    places = [
        (("defaults", "engine"), mapping(mapping(checker.data.get("defaults")).get("engine"))),
        *((("hosts", n, "engine"), mapping(mapping(b).get("engine"))) for n, b in _hosts(checker)),
        *((("models", n, "engine"), mapping(mapping(b).get("engine"))) for n, b in _models(checker)),
    ]
    for path, engine in places:
        reference = mapping(engine.get("index_credentials")).get("secret")
        if not isinstance(reference, str):
            continue
        where = (*path, "index_credentials", "secret")
        if reference not in secrets:
            checker.add(
                where,
                f"unknown secret '{reference}'",
                did_you_mean(reference, set(secrets)) or "add it under secrets:",
            )
    message, hint = "index_credentials without an index_url", "add the index_url these credentials are for"
    for host, merged in checker.resolved.hosts.items():
        engine = mapping(merged.get("engine"))
        if "index_credentials" in engine and not engine.get("index_url"):
            checker.add_at(checker.where(host, ("engine", "index_credentials")), message, hint)
    defaults = mapping(mapping(checker.data.get("defaults")).get("engine"))
    for name, body in _models(checker):
        override = mapping(mapping(body).get("engine"))
        engine = {**defaults, **override}
        if override and "index_credentials" in engine and not engine.get("index_url"):
            checker.add(("models", name, "engine"), message, hint, True)


def _hosts(checker: Checker) -> list[tuple[str, Any]]:
    return list(mapping(checker.data.get("hosts")).items())


def _models(checker: Checker) -> list[tuple[str, Any]]:
    return list(mapping(checker.data.get("models")).items())
