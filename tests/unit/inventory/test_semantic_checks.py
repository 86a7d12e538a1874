"""Semantic problems: references, name and port clashes, engine flags, control characters, secrets."""

from __future__ import annotations

from collections.abc import Callable

Problems = Callable[..., list[str]]

HEAD = """\
vllmctl: 1
hosts:
  gpu-01: {address: 10.0.0.1}
  gpu-02: {address: 10.0.0.2}
"""


def test_unknown_references_and_name_clashes(problems: Problems) -> None:
    assert problems(
        HEAD
        + """\
groups:
  gpu-01: [gpu-02]
  h100: [gpu-01, gpu-03, empty]
  empty: []
models:
  a: {source: org/a, hosts: h10}
  b: {source: org/b, hosts: [gpu-02, nodes]}
  c: {source: org/c, hosts: empty}
"""
    ) == [
        "inv.yml:6:3: groups.gpu-01: group 'gpu-01' has the same name as a host\n  hint: rename one",
        "inv.yml:7:18: groups.h100[1]: unknown host or group 'gpu-03'\n  hint: did you mean 'gpu-02'?",
        "inv.yml:10:29: models.a.hosts: unknown host or group 'h10'\n  hint: did you mean 'h100'?",
        "inv.yml:11:38: models.b.hosts[1]: unknown host or group 'nodes'\n  hint: define it",
        "inv.yml:12:29: models.c.hosts: model 'c' resolves to no hosts\n  hint: add hosts to the group",
    ]


def test_group_cycle(problems: Problems) -> None:
    found = problems(HEAD + "groups:\n  a: [b]\n  b: [a, gpu-01]\n")
    assert found == [
        "inv.yml:6:3: groups.a: group 'a' includes itself: a → b → a\n  hint: remove one of the "
        "group references",
        "inv.yml:7:3: groups.b: group 'b' includes itself: b → a → b\n  hint: remove one of the "
        "group references",
    ]


def test_two_models_on_one_host_with_the_same_port(problems: Problems) -> None:
    assert problems(
        HEAD
        + """\
groups: {all-gpus: [gpu-01, gpu-02]}
models:
  a: {source: org/a, hosts: all-gpus}
  b: {source: org/b, hosts: gpu-02, port: 8001}
  c:
    source: org/c
    hosts: gpu-02
"""
    ) == [
        "inv.yml:9:3: models.c.port: port 8000 on host 'gpu-02' is already used by model 'a'\n"
        "  hint: give each model on a host its own port",
    ]


def test_engine_args_checked_against_the_engine_of_the_hosts(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts:
          v: {address: 10.0.0.1}
          s: {address: 10.0.0.2, engine: {name: sglang}}
        secrets: {key: {env: API_KEY}}
        models:
          a:
            source: org/a
            hosts: v
            engine_args:
              gpu_memory_utilisation: 0.9
              max-num-seqs: 8
              tensor_parallel_size: "2"
              gpu_memory_utilization: 1.5
              kv_cache_dtype: fp4
              enforce_eager: 1
              port: 9000
              api_key: {secret: kee}
          b:
            source: org/b
            hosts: s
            port: 30000
            engine_args: {tensor_parallel_size: 2, mem_fraction_static: 0.8, api_key: {secret: key}}
          c:
            source: org/c
            hosts: v
            port: 8100
            engine: {name: sglang}
            engine_args: {tp_size: 2}
        """
    ) == [
        "inv.yml:11:7: models.a.engine_args.gpu_memory_utilisation: unknown vllm flag "
        "'gpu_memory_utilisation'\n"
        "  hint: did you mean 'gpu_memory_utilization'?",
        "inv.yml:12:7: models.a.engine_args.max-num-seqs: unknown vllm flag 'max-num-seqs'\n"
        "  hint: engine_args use snake_case: 'max_num_seqs'",
        "inv.yml:13:29: models.a.engine_args.tensor_parallel_size: expected an integer, got '2'\n"
        "  hint: vllm flag --tensor-parallel-size",
        "inv.yml:14:31: models.a.engine_args.gpu_memory_utilization: must be <= 1, got 1.5\n"
        "  hint: vllm flag --gpu-memory-utilization",
        "inv.yml:15:23: models.a.engine_args.kv_cache_dtype: must be one of auto, bfloat16, fp8, fp8_e4m3, "
        "fp8_e5m2, fp8_inc, got 'fp4'\n  hint: vllm flag --kv-cache-dtype",
        "inv.yml:16:22: models.a.engine_args.enforce_eager: expected true or false, got 1\n"
        "  hint: vllm flag --enforce-eager",
        "inv.yml:17:7: models.a.engine_args.port: 'port' is set by vllmctl, not engine_args\n"
        "  hint: set it with models.a.port",
        "inv.yml:18:16: models.a.engine_args.api_key: unknown secret 'kee'\n  hint: did you mean 'key'?",
        "inv.yml:23:19: models.b.engine_args.tensor_parallel_size: unknown sglang flag "
        "'tensor_parallel_size'\n"
        "  hint: see `python -m sglang.launch_server --help`",
        "inv.yml:23:70: models.b.engine_args.api_key: sglang api_key: not supported: SGLang takes the key "
        "only on its command line\n"
        "  hint: serve it with vllm to protect it with an API key, or put an authenticating proxy in front",
    ]


def test_control_characters_are_rejected(problems: Problems) -> None:
    assert problems(
        r"""
        vllmctl: 1
        hosts:
          a: {address: "10.0.0.1\n; rm -rf /", vars: {banner: "hi\e[31m", "k\0": 1}}
        models:
          m: {source: org/m, hosts: a, revision: "main\tx"}
        """
    ) == [
        "inv.yml:4:16: hosts.a.address: value contains a control character (U+000A newline); "
        "values reach shell commands and unit files\n  hint: remove it; put multi-line text in a file",
        "inv.yml:4:16: hosts.a.address: '10.0.0.1\\n; rm -rf /' is not a host name, IPv4 or IPv6 address "
        "(it contains '\\n')\n"
        "  hint: an address is a DNS name (letters, digits, '-', '_' and '.'), an IPv4 address, or an IPv6 "
        "address (bare or in [brackets])",
        "inv.yml:4:55: hosts.a.vars.banner: value contains a control character (U+001B escape); "
        "values reach shell commands and unit files\n  hint: remove it; put multi-line text in a file",
        "inv.yml:4:67: hosts.a.vars.k\\x00: key contains a control character (U+0000 NUL)\n  hint: remove it",
        "inv.yml:6:42: models.m.revision: a revision has no spaces and does not start with '-'; "
        "got string 'main\\tx'\n  hint: Model revision (branch, tag or commit) on the hub.",
        "inv.yml:6:42: models.m.revision: value contains a control character (U+0009 tab); "
        "values reach shell commands and unit files\n  hint: remove it; put multi-line text in a file",
    ]


def test_literal_secrets_are_rejected(problems: Problems) -> None:
    token = "hf_" + "a1B2c3D4" * 5
    found = problems(
        f"""\
        vllmctl: 1
        hosts:
          a: {{address: 10.0.0.1, vars: {{hf_token: abc, note: "uses {token}"}}}}
        models:
          m:
            source: org/m
            hosts: a
            engine_args: {{api_key: sekrit, override_generation_config: {{x: {token}}}}}
        secrets:
          hf_token: {token}
          other: {{env: X, file: /y}}
        """
    )
    assert found == [
        "inv.yml:3:43: hosts.a.vars.hf_token: 'hf_token' holds a literal secret\n"
        "  hint: move it to `secrets:` as {env: VAR} or {file: PATH} and reference that instead",
        "inv.yml:3:54: hosts.a.vars.note: looks like a literal secret (Hugging Face token)\n"
        "  hint: move it to `secrets:` as {env: VAR} or {file: PATH} and reference that instead",
        "inv.yml:8:28: models.m.engine_args.api_key: must be a reference to a secret, {secret: NAME}, "
        "never the value itself\n"
        "  hint: declare it under `secrets:` ({env: VAR} or {file: PATH}) and write {secret: NAME} here",
        "inv.yml:8:68: models.m.engine_args.override_generation_config.x: looks like a literal secret "
        "(Hugging Face token)\n"
        "  hint: move it to `secrets:` as {env: VAR} or {file: PATH} and reference that instead",
        "inv.yml:10:13: secrets.hf_token: a secret is a reference, {env: VAR} or {file: PATH}, "
        "never the value itself\n  hint: Where one secret comes from: exactly one of env or file; and "
        "optionally which models get it.",
        "inv.yml:11:10: secrets.other: a secret is a reference, {env: VAR} or {file: PATH}, "
        "never the value itself\n  hint: Where one secret comes from: exactly one of env or file; and "
        "optionally which models get it.",
    ]
    assert all(token not in line and "sekrit" not in line for line in found)


def test_parallelism_must_fit_the_declared_gpus_and_context_is_set_once(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts:
          a: {address: 10.0.0.1, gpus: {model: L40S, count: 4}}
          s: {address: 10.0.0.2, gpus: {model: A100-80GB, count: 4}, engine: {name: sglang}}
          u: {address: 10.0.0.3}
        models:
          big:
            source: org/big
            hosts: [u, a]
            max_model_len: 8192
            engine_args: {tensor_parallel_size: 4, pipeline_parallel_size: 2, max_model_len: 4096}
          sg:
            source: org/sg
            hosts: s
            engine_args: {tp_size: 4, dp_size: 4, enable_dp_attention: true}
          sg2:
            source: org/sg2
            hosts: s
            port: 8001
            engine_args: {tp_size: 2, dp_size: 4}
        """
    ) == [
        "inv.yml:11:5: models.big.engine_args: needs 8 GPUs "
        "(tensor_parallel_size 4 × pipeline_parallel_size 2) but host 'a' declares 4\n"
        "  hint: lower the parallelism, or serve the model on hosts with more GPUs",
        "inv.yml:11:86: models.big.engine_args.max_model_len: max_model_len 4096 differs from "
        "models.big.max_model_len 8192\n"
        "  hint: set the context length once, with models.big.max_model_len",
        "inv.yml:20:5: models.sg2.engine_args: needs 8 GPUs (tp_size 2 × dp_size 4) but host 's' declares 4\n"
        "  hint: lower the parallelism, or serve the model on hosts with more GPUs",
    ]


def test_nested_groups_report_each_problem_once(problems: Problems) -> None:
    found = problems(HEAD + "groups:\n  a: [b]\n  b: [c]\n  c: [gpu-1]\n")
    assert found == [
        "inv.yml:8:7: groups.c[0]: unknown host or group 'gpu-1'\n  hint: did you mean 'gpu-01'?"
    ]
