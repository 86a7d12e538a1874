"""load_inventory: file → YAML with positions → schema → semantic checks → typed Inventory.

Every problem in every file read is collected and raised together as one InvalidInputError, with every
unprintable character in it escaped (a bidi override in a key never reaches the terminal raw).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from vllmctl.errors import InvalidInputError, Location, Problem
from vllmctl.inventory.ansible import AnsibleImport, load_ansible_file, looks_like_ansible, yaml_document
from vllmctl.inventory.checks import run_checks
from vllmctl.inventory.clusters import cluster_specs
from vllmctl.inventory.model import (
    AdapterSpec,
    CanarySpec,
    ClusterSpec,
    DriverSpec,
    EngineSpec,
    GatewaySpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    ReleaseSettings,
    SecretRef,
    SpeculativeSpec,
    SshSettings,
    StagingSettings,
    TlsFiles,
    VipSpec,
)
from vllmctl.inventory.positions import SourceDoc, escape_text
from vllmctl.inventory.resolve import Checker, Resolved, mapping
from vllmctl.inventory.scan import scan_strings
from vllmctl.inventory.schema import schema_problems
from vllmctl.inventory.values import bare_address
from vllmctl.releases.waves import MaxUnavailable

if TYPE_CHECKING:
    from vllmctl.inventory.resolve import ControllerFiles


def _read_ansible(doc: SourceDoc, problems: list[Problem]) -> AnsibleImport:
    reference = mapping(doc.data).get("ansible_inventory")
    if not isinstance(reference, str) or not reference:
        return AnsibleImport()
    target = os.path.join(os.path.dirname(doc.file), os.path.expanduser(reference))
    if not os.path.isfile(target):
        problems.append(
            Problem(
                doc.location(("ansible_inventory",)),
                f"Ansible inventory '{reference}' not found (looked for {target})",
                "the path is relative to this inventory file",
            )
        )
        return AnsibleImport()
    try:
        imported = load_ansible_file(target, yaml_document(target))
    except InvalidInputError as exc:
        problems.extend(exc.problems)
        return AnsibleImport()
    problems.extend(imported.problems)
    return imported


def _host(name: str, merged: dict[str, Any]) -> Host:
    ssh = dict(merged["ssh"])
    if "connect_timeout_s" in ssh:
        ssh["connect_timeout_s"] = float(ssh["connect_timeout_s"])
    driver = dict(merged["driver"])
    if driver.get("branch") is not None:
        driver["branch"] = str(driver["branch"])
    gpus = merged.get("gpus")
    return Host(
        name=name,
        address=bare_address(str(merged["address"])),
        ssh=SshSettings(**ssh, given=frozenset(ssh)),
        gpus=GpuSpec(**gpus) if isinstance(gpus, dict) else None,
        driver=DriverSpec(**driver),
        engine=_engine(merged["engine"]),
        vars=dict(merged["vars"]),
    )


def _engine(raw: dict[str, Any]) -> EngineSpec:
    settings = dict(raw)
    credentials = settings.pop("index_credentials", None)
    return EngineSpec(**settings, index_credentials=mapping(credentials).get("secret"))


def _model(
    name: str,
    body: dict[str, Any],
    hosts: tuple[str, ...],
    defaults: dict[str, Any],
    cluster: ClusterSpec | None = None,
) -> ModelDeployment:
    override = body.get("engine")
    engine = _engine({**mapping(defaults.get("engine")), **override}) if isinstance(override, dict) else None
    return ModelDeployment(
        name=name,
        source=body["source"],
        hosts=hosts,
        port=body.get("port", 8000),
        profile=body.get("profile", "balanced"),
        max_model_len=body.get("max_model_len"),
        allow_context_shrink=body.get("allow_context_shrink", False),
        tight_fit=body.get("tight_fit", False),
        engine=engine,
        engine_args=dict(mapping(body.get("engine_args"))),
        slo={key: float(value) for key, value in mapping(body.get("slo")).items()},
        min_available=body.get("min_available", 1),
        max_unavailable=MaxUnavailable.parse(body["max_unavailable"]) if "max_unavailable" in body else None,
        canary=_canary(mapping(body.get("canary")), "canary" in body),
        revision=body.get("revision"),
        use_case=body.get("use_case"),
        sampling=_sampling(mapping(body.get("sampling"))),
        multimodal={key: int(value) for key, value in mapping(body.get("multimodal")).items()},
        workload=body.get("workload", "independent"),
        cluster=cluster,
        adapters=tuple(AdapterSpec(**mapping(a)) for a in body.get("adapters") or ()),
        speculative=SpeculativeSpec(**mapping(body["speculative"])) if body.get("speculative") else None,
    )


def _canary(raw: dict[str, Any], given: bool) -> CanarySpec:
    hosts = raw.get("hosts")
    bounds = (float(raw.get("max_error_rate", 0.01)), float(raw.get("max_latency_ratio", 1.5)))
    count = int(hosts) if hosts is not None else None
    return CanarySpec(count, float(raw.get("soak_s", 0.0)), *bounds, given)


def _sampling(raw: dict[str, Any]) -> dict[str, float | int]:
    # JSON Schema counts 2.0 as an integer; the engines want top_k, seed and max_tokens as real ints.
    whole = ("top_k", "seed", "max_tokens")
    return {key: int(value) if key in whole else float(value) for key, value in raw.items()}


def _gateway(raw: Any, hosts: tuple[str, ...]) -> GatewaySpec | None:
    if not isinstance(raw, dict):
        return None
    tls = raw.get("tls")
    metrics = raw.get("metrics_port")
    default_balance = str(raw.get("balance", "leastconn"))
    return GatewaySpec(
        hosts=hosts,
        ports={name: int(body["port"]) for name, body in raw["models"].items()},
        address=str(raw.get("address", GatewaySpec.address)),
        check_api_key=bool(raw.get("check_api_key", False)),
        tls=TlsFiles(str(tls["cert"]), str(tls["key"])) if isinstance(tls, dict) else None,
        check_interval_s=float(raw.get("check_interval_s", GatewaySpec.check_interval_s)),
        drain_timeout_s=float(raw.get("drain_timeout_s", GatewaySpec.drain_timeout_s)),
        metrics_port=int(metrics) if metrics is not None else None,
        balance={name: str(body.get("balance", default_balance)) for name, body in raw["models"].items()},
        hash_balance_factor=int(raw.get("hash_balance_factor", GatewaySpec.hash_balance_factor)),
        prefix_bytes=int(raw.get("prefix_bytes", GatewaySpec.prefix_bytes)),
        session_header=str(raw.get("session_header", GatewaySpec.session_header)),
        vip=_vip(raw.get("vip")),
    )


def _vip(raw: Any) -> VipSpec | None:
    if not isinstance(raw, dict):
        return None
    vrid = int(raw.get("virtual_router_id", VipSpec.virtual_router_id))
    return VipSpec(str(raw["address"]), str(raw["interface"]), vrid)


def _build(doc: SourceDoc, resolved: Resolved) -> Inventory:
    data = mapping(doc.data)
    defaults = mapping(data.get("defaults"))
    clusters = cluster_specs(data, resolved)
    models = {
        name: _model(
            name,
            body,
            resolved.model_hosts.get(name, ()),
            defaults,
            clusters.get(resolved.model_clusters.get(name, "")),
        )
        for name, body in mapping(data.get("models")).items()
    }
    secrets = {
        name: SecretRef(
            name,
            env=body.get("env"),
            file=body.get("file"),
            models=tuple(body["models"]) if "models" in body else None,
        )
        for name, body in mapping(data.get("secrets")).items()
    }
    return Inventory(
        path=doc.file,
        hosts={name: _host(name, merged) for name, merged in resolved.hosts.items()},
        groups=dict(resolved.groups),
        models=models,
        secrets=secrets,
        releases=ReleaseSettings(keep=int(mapping(data.get("releases")).get("keep", ReleaseSettings.keep))),
        staging=_staging(mapping(data.get("staging"))),
        clusters=clusters,
        gateway=_gateway(data.get("gateway"), resolved.gateway_hosts),
    )


def _staging(data: dict[str, Any]) -> StagingSettings:
    default = StagingSettings()
    return StagingSettings(
        fanout=bool(data.get("fanout", default.fanout)),
        per_source=int(data.get("per_source", default.per_source)),
        locality=str(data.get("locality", default.locality)),
    )


def _load_ansible_only(file: str, imported: AnsibleImport, files: ControllerFiles | None) -> Inventory:
    problems = list(imported.problems)
    # the same host checks a vllmctl inventory's hosts get, with no vllmctl settings around them
    checker = Checker(SourceDoc(file, {"hosts": None}), imported, files)
    resolved = run_checks(checker)
    problems.extend(checker.problems)
    if problems:
        raise InvalidInputError(problems)
    hosts = {name: _host(name, merged) for name, merged in resolved.hosts.items()}
    return Inventory(path=file, hosts=hosts, groups=dict(resolved.groups), models={})


def _escaped(problem: Problem) -> Problem:
    where = problem.location
    location = Location(escape_text(where.file), where.line, where.column, escape_text(where.path))
    return Problem(location, escape_text(problem.message), escape_text(problem.hint))


def load_inventory(path: str | os.PathLike[str], files: ControllerFiles | None = None) -> Inventory:
    """Read and check an inventory (or a plain Ansible YAML inventory); raise every problem at once.

    With `files` (the controller's filesystem, e.g. controller.LocalFiles()), the SSH keys, known_hosts,
    secret files and local model folders it names are checked on the controller too.
    """
    try:
        return _load(path, files)
    except InvalidInputError as exc:
        raise InvalidInputError([_escaped(problem) for problem in exc.problems]) from None


def _load(path: str | os.PathLike[str], files: ControllerFiles | None) -> Inventory:
    file = os.fspath(path)
    doc = yaml_document(file)
    if doc is None or looks_like_ansible(doc.data):
        return _load_ansible_only(file, load_ansible_file(file, doc), files)
    problems = [*doc.problems, *schema_problems(doc)]
    problems.extend(scan_strings(doc))
    imported = _read_ansible(doc, problems)
    checker = Checker(doc, imported, files)
    resolved = run_checks(checker)
    problems.extend(checker.problems)
    if problems:
        raise InvalidInputError(problems)
    return _build(doc, resolved)
