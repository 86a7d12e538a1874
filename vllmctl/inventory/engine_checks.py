"""Engine checks per model: `engine_args` against the flag table of the engine it runs on (known flags,
types, ranges, values that would become flags, secret references), and parallelism against declared GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllmctl.engine_flags import KNOWN_FLAGS, MANAGED_FLAGS, dash_item, value_problem
from vllmctl.inventory.resolve import mapping
from vllmctl.inventory.schema import did_you_mean

if TYPE_CHECKING:
    from vllmctl.inventory.positions import FieldPath
    from vllmctl.inventory.resolve import Checker

HELP_COMMANDS = {"vllm": "vllm serve --help", "sglang": "python -m sglang.launch_server --help"}
# GPUs one replica uses, per engine: the product of these engine_args (each defaults to 1)
GPU_FACTORS = {
    "vllm": ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"),
    "sglang": ("tp_size", "pp_size", "dp_size"),
}
CONTEXT_FLAGS = {"vllm": "max_model_len", "sglang": "context_length"}
ENGINE_SECRET_HINT = "declare it under `secrets:` ({env: VAR} or {file: PATH}) and write {secret: NAME} here"
REFUSED_HINTS = {
    "api_key": "serve it with vllm to protect it with an API key, or put an authenticating proxy in front"
}


def check_engine_args(checker: Checker, name: str, model: dict[str, Any]) -> None:
    args = mapping(model.get("engine_args"))
    for engine in checker.engines_for(name, model):
        flags = KNOWN_FLAGS[engine]
        for flag, value in args.items():
            path = ("models", name, "engine_args", flag)
            if flag in MANAGED_FLAGS:
                hint = f"set it with models.{name}.{MANAGED_FLAGS[flag]}"
                if flag == "host":
                    hint = MANAGED_FLAGS[flag]
                checker.add(path, f"'{flag}' is set by vllmctl, not engine_args", hint, True)
            elif flag not in flags:
                snake = flag.replace("-", "_").lstrip("_")
                hint = (
                    f"engine_args use snake_case: '{snake}'" if snake in flags else did_you_mean(flag, flags)
                )
                checker.add(
                    path,
                    f"unknown {engine} flag '{flag}'",
                    hint or f"see `{HELP_COMMANDS[engine]}`",
                    True,
                )
            elif flags[flag].refused:
                checker.add(path, f"{engine} {flag}: {flags[flag].refused}", REFUSED_HINTS[flag], True)
            elif (why := value_problem(flags[flag], value)) is not None:
                shown = "" if flags[flag].secret else f", got {_short(value)}"
                hint = (
                    ENGINE_SECRET_HINT if flags[flag].secret else f"{engine} flag --{flag.replace('_', '-')}"
                )
                item = dash_item(value)
                checker.add(path if item is None else (*path, item), f"{why}{shown}", hint)
            elif flags[flag].secret:
                secret_reference(checker, name, path, str(value["secret"]))


def secret_reference(checker: Checker, model: str, path: FieldPath, ref: str) -> None:
    """A {secret: NAME} in a model: the secret exists and is given to that model."""
    secrets = mapping(checker.data.get("secrets"))
    if ref not in secrets:
        checker.add(
            path, f"unknown secret '{ref}'", did_you_mean(ref, set(secrets)) or "add it under secrets:"
        )
        return
    scope = mapping(secrets[ref]).get("models")
    if isinstance(scope, list) and model not in scope:
        checker.add(
            path,
            f"secret '{ref}' is not given to model '{model}' (its models: {', '.join(map(str, scope))})",
            f"add {model} to secrets.{ref}.models",
        )


def check_gpu_fit(checker: Checker, name: str, model: dict[str, Any]) -> None:
    """Parallelism that needs more GPUs than a host declares, and two different context lengths."""
    args = mapping(model.get("engine_args"))
    for engine in checker.engines_for(name, model):
        flag_name, context, length = (
            CONTEXT_FLAGS[engine],
            args.get(CONTEXT_FLAGS[engine]),
            model.get("max_model_len"),
        )
        if isinstance(length, int) and isinstance(context, int) and context != length:
            checker.add(
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
        for host in checker.resolved.model_hosts.get(name, ()):
            gpus = mapping(checker.resolved.hosts[host].get("gpus"))
            count = gpus.get("count")
            if isinstance(count, int) and 1 <= count < needed:
                used = " × ".join(f"{flag} {value}" for flag, value in factors if args.get(flag) is not None)
                checker.add(
                    ("models", name, "engine_args"),
                    f"needs {needed} GPUs ({used}) but host '{host}' declares {count}",
                    "lower the parallelism, or serve the model on hosts with more GPUs",
                    True,
                )
                break


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
