"""Schema problems: unknown keys with did-you-mean, wrong types, ranges, enums, required keys, names."""

from __future__ import annotations

from collections.abc import Callable

from jsonschema import Draft202012Validator

from vllmctl.inventory import inventory_schema

Problems = Callable[..., list[str]]


def test_schema_is_valid_draft_2020_12_with_descriptions() -> None:
    schema = inventory_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"

    def walk(node: dict[str, object], where: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            # every mapping with known keys refuses others, unless it says it is free-form
            assert node.get("additionalProperties") in (False, True), where
        for key, prop in dict(node.get("properties", {})).items():  # type: ignore[call-overload]
            target = schema["$defs"][prop["$ref"].split("/")[-1]] if "$ref" in prop else prop
            assert "description" in prop or "description" in target, f"{where}.{key}"
            walk(prop, f"{where}.{key}")

    walk(schema, "top")
    for name, node in schema["$defs"].items():
        walk(node, name)


def test_unknown_keys_get_did_you_mean(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts:
          gpu-01: {adress: 10.0.0.1}
        modles: {}
        models:
          m: {source: org/m, hosts: gpu-01, max_model_length: 10, zzz: 1}
        """
    ) == [
        "inv.yml:3:12: hosts.gpu-01.adress: unknown key 'adress'\n  hint: did you mean 'address'?",
        "inv.yml:4:1: modles: unknown key 'modles'\n  hint: did you mean 'models'?",
        "inv.yml:6:37: models.m.max_model_length: unknown key 'max_model_length'\n"
        "  hint: did you mean 'max_model_len'?",
        "inv.yml:6:59: models.m.zzz: unknown key 'zzz'\n  hint: allowed keys here: "
        "adapters, allow_context_shrink, canary, engine, "
        "engine_args, hosts, max_model_len, max_unavailable, min_available, multimodal, port, profile, "
        "revision, sampling, "
        "slo, source, "
        "speculative, tight_fit, use_case, workload",
    ]


def test_wrong_types(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        defaults:
          engine: {version: 0.10}
          ssh: {sudo: "yes please", port: "22"}
        hosts:
          gpu-01:
            address: 10.0.0.1
            gpus: [H100]
        models: []
        """
    ) == [
        'inv.yml:3:21: defaults.engine.version: a version looks like "0.11.0"; got number 0.1\n'
        '  hint: quote it: YAML reads 0.10 as the number 0.1 (write "0.10")',
        "inv.yml:4:15: defaults.ssh.sudo: expected true or false, got string 'yes please'\n"
        "  hint: Run privileged steps through sudo (needed when user is not root).",
        "inv.yml:4:35: defaults.ssh.port: expected an integer, got string '22'\n  hint: SSH port (1–65535).",
        "inv.yml:8:11: hosts.gpu-01.gpus: expected a mapping, got a list\n"
        "  hint: write the settings as `key: value` lines indented under this key",
        "inv.yml:9:9: models: expected a mapping, got a list\n"
        "  hint: write the settings as `key: value` lines indented under this key",
    ]


def test_ranges(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts:
          a: {address: 10.0.0.1, ssh: {port: 0, connect_timeout_s: 0}, gpus: {model: L40S, count: 0}}
        models:
          m: {source: org/m, hosts: a, port: 65536, slo: {max_error_rate: 2}}
        """
    ) == [
        "inv.yml:3:38: hosts.a.ssh.port: must be >= 1, got integer 0\n  hint: SSH port (1–65535).",
        "inv.yml:3:60: hosts.a.ssh.connect_timeout_s: must be > 0, got integer 0\n"
        "  hint: Seconds to wait for the SSH connection.",
        "inv.yml:3:91: hosts.a.gpus.count: must be >= 1, got integer 0\n  hint: Number of GPUs (at least 1).",
        "inv.yml:5:38: models.m.port: must be <= 65535, got integer 65536\n"
        "  hint: HTTP port of the first replica (1024–65535); replica i listens on port + i.",
        "inv.yml:5:67: models.m.slo.max_error_rate: must be <= 1, got integer 2\n"
        "  hint: Highest acceptable fraction of failed requests (0–1).",
    ]


def test_enums_and_const(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 2
        defaults: {engine: {name: vlm}}
        hosts: {a: {address: 10.0.0.1}}
        models:
          m: {source: org/m, hosts: a, profile: throughput-max}
        """
    ) == [
        "inv.yml:1:10: vllmctl: must be 1 (the only inventory format version); got integer 2\n"
        "  hint: Inventory format version; must be 1.",
        "inv.yml:2:27: defaults.engine.name: must be one of vllm, sglang; got string 'vlm'\n"
        "  hint: did you mean 'vllm'?",
        "inv.yml:5:41: models.m.profile: must be one of throughput, latency, balanced, memory-saver; "
        "got string 'throughput-max'\n  hint: did you mean 'throughput'?",
    ]


def test_required_keys_point_at_the_entry(problems: Problems) -> None:
    assert problems(
        """\
        hosts: {a: {address: 10.0.0.1, gpus: {model: L40S}}}
        models:
          m: {hosts: a}
        """
    ) == [
        "inv.yml:1:1: missing required key 'vllmctl'\n  hint: add `vllmctl:`",
        "inv.yml:1:32: hosts.a.gpus: missing required key 'count'\n  hint: add `count:`",
        "inv.yml:3:3: models.m: missing required key 'source'\n  hint: add `source:`",
    ]


def test_bad_names_sources_and_urls(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts:
          "gpu 01": {address: 10.0.0.1}
          b: {address: 10.0.0.2, engine: {index_url: "ftp://mirror"}}
        models:
          m: {source: ./models/m, hosts: b}
        """
    ) == [
        "inv.yml:3:3: hosts.gpu 01: invalid name 'gpu 01': names use letters, digits, '.', '_' and '-', "
        "start with a letter or digit, at most 63 characters\n  hint: rename it",
        # an index URL is never echoed back: it may carry a password
        "inv.yml:4:46: hosts.b.engine.index_url: an index URL starts with http://, https:// or file://\n"
        "  hint: Package index URL to install from (e.g. a local mirror), without credentials: a mirror's "
        "user and password go in `index_credentials`.",
        "inv.yml:6:15: models.m.source: a source is a hub id like org/name or an absolute path like "
        "/models/x; "
        "got string './models/m'\n  hint: Hugging Face hub id (org/name) or an absolute local path, synced "
        "from the controller to the same path on the hosts.",
    ]


def test_dcgm_switches_are_booleans_under_driver(problems: Problems) -> None:
    found = problems(
        """\
        vllmctl: 1
        defaults:
          driver: {branch: "570", dcgm_diag: "yes please"}
        hosts:
          gpu-01: {driver: {dcgm_exporter: 1}}
        """
    )
    assert [line.split("\n")[0] for line in found] == [
        "inv.yml:3:38: defaults.driver.dcgm_diag: expected true or false, got string 'yes please'",
        "inv.yml:5:36: hosts.gpu-01.driver.dcgm_exporter: expected true or false, got integer 1",
    ]
