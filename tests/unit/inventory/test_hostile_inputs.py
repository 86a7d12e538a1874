"""Issue #17: each hostile inventory is refused with one problem at FILE:LINE:COL, its field path, a message
and a hint; none of them passed `validate` before. The controller's own files are in test_controller_files.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from vllmctl.errors import InvalidInputError, Problem
from vllmctl.inventory import load_inventory

HOST = "vllmctl: 1\nhosts:\n  a: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 8}}\n"
MODEL = HOST + "models:\n  m: {source: org/m, hosts: a, engine_args: ARGS}\n"
SECRETS = HOST + "models:\n  m: {source: org/m, hosts: a}\n"


def model(args: str) -> str:
    return MODEL.replace("ARGS", args)


def address(value: str) -> str:
    return f'vllmctl: 1\nhosts:\n  a: {{address: "{value}"}}\n'


def ssh(settings: str) -> str:
    return f"vllmctl: 1\nhosts:\n  a: {{address: 10.0.0.1, ssh: {{{settings}}}}}\n"


def source(path: str) -> str:
    return HOST + f'models:\n  m: {{source: "{path}", hosts: a}}\n'


# (id, inventory, "LINE:COL field.path", message fragment, hint fragment)
CASES = [
    # 1. env-file names: secrets and vars.env keys
    ("secret-dash", SECRETS + "secrets: {hf-token: {env: T}}\n", "6:11 secrets.hf-token",
     "an environment variable name is", "rename it"),
    ("secret-dot", SECRETS + "secrets: {hf.token: {env: T}}\n", "6:11 secrets.hf.token",
     "an environment variable name is", "rename it"),
    ("secret-digit", SECRETS + "secrets: {1key: {env: T}}\n", "6:11 secrets.1key",
     "an environment variable name is", "rename it"),
    ("secret-space", SECRETS + 'secrets: {"MY VAR": {env: T}}\n', "6:11 secrets.MY VAR",
     "an environment variable name is", "rename it"),
    ("secret-path", SECRETS + "secrets: {path: {env: T}}\n", "6:11 secrets.path",
     "PATH may not be set: it changes which code", "rename the secret"),
    ("secret-ld-preload", SECRETS + "secrets: {ld_preload: {env: T}}\n", "6:11 secrets.ld_preload",
     "LD_PRELOAD may not be set", "rename the secret"),
    ("secret-case-clash", SECRETS + "secrets: {hf_token: {env: A}, HF_Token: {env: B}}\n",
     "6:31 secrets.HF_Token", "'hf_token' and 'HF_Token' both become HF_TOKEN", "rename one"),
    ("secret-managed", SECRETS + "secrets: {vllm_api_key: {env: K}}\n", "6:11 secrets.vllm_api_key",
     "VLLM_API_KEY may not be set: vllmctl sets it", "engine_args.api_key"),
    ("env-equals", HOST.replace("count: 8}", "count: 8}, vars: {env: {'A=B': x}}"),
     "3:75 hosts.a.vars.env.A=B", "an environment variable name is", "rename it"),
    ("env-hash", HOST.replace("count: 8}", "count: 8}, vars: {env: {'A#B': x}}"),
     "3:75 hosts.a.vars.env.A#B", "an environment variable name is", "rename it"),
    ("env-pythonpath", HOST.replace("count: 8}", "count: 8}, vars: {env: {PYTHONPATH: /x}}"),
     "3:75 hosts.a.vars.env.PYTHONPATH", "PYTHONPATH may not be set", "pick another name"),
    ("env-cuda-devices", HOST.replace("count: 8}", "count: 8}, vars: {env: {CUDA_VISIBLE_DEVICES: '0'}}"),
     "3:75 hosts.a.vars.env.CUDA_VISIBLE_DEVICES", "vllmctl sets it", "pins each replica"),
    ("env-case-clash", HOST.replace("count: 8}", "count: 8}, vars: {env: {Foo: '1', FOO: '2'}}"),
     "3:85 hosts.a.vars.env.FOO", "'FOO' and 'Foo' differ only in case", "keep one"),
    ("env-vs-secret", SECRETS.replace("count: 8}", "count: 8}, vars: {env: {API_TOKEN_X: '1'}}")
     + "secrets: {api_token_x: {env: T}}\n", "3:75 hosts.a.vars.env.API_TOKEN_X",
     "also the env name of secret 'api_token_x'", "remove it from vars.env"),
    ("env-not-an-integer",
     HOST.replace("count: 8}", "count: 8}, vars: {env: {VLLM_USE_V2_MODEL_RUNNER: 'yes'}}"),
     "3:101 hosts.a.vars.env.VLLM_USE_V2_MODEL_RUNNER",
     "stops vLLM at start: it reads the value as an integer", "set it to 1 or 0"),
    ("env-list", HOST.replace("count: 8}", "count: 8}, vars: {env: [A=1]}"),
     "3:74 hosts.a.vars.env", "expected a mapping, got a list", "NAME: value lines under env"),
    ("secret-scope-unknown-model", SECRETS + "secrets: {t: {env: T, models: [m, x]}}\n",
     "6:35 secrets.t.models[1]", "unknown model 'x'", "models:"),
    ("api-key-not-scoped", model("{api_key: {secret: k}}") + "secrets: {k: {env: K, models: []}}\n",
     "5:55 models.m.engine_args.api_key", "secret 'k' is not given to model 'm'",
     "add m to secrets.k.models"),
    # 2. local model sources and other host folders
    ("source-root", source("/"), "5:15 models.m.source", "/ is a shared system directory", "/srv/models"),
    ("source-etc-systemd", source("/etc/systemd/system"), "5:15 models.m.source",
     "inside the system directory /etc", "/srv/models"),
    ("source-root-ssh", source("/root/.ssh"), "5:15 models.m.source", "inside the system directory /root",
     "/srv/models"),
    ("source-home-ssh", source("/home/ops/.ssh/keys"), "5:15 models.m.source", "inside an .ssh directory",
     "/srv/models"),
    ("source-dotdot", source("/models/../etc"), "5:15 models.m.source", "has a '.' or '..' component",
     "without '.' or '..'"),
    ("source-state-dir", source("/var/lib/vllmctl/models/x"), "5:15 models.m.source",
     "inside the system directory /var/lib/vllmctl", "/srv/models"),
    ("source-lib64", source("/lib64/x"), "5:15 models.m.source", "inside the system directory /lib64",
     "/srv/models"),
    ("source-home", source("/home/ops"), "5:15 models.m.source", "a whole home directory", "/srv/models"),
    ("source-trailing-slash", source("/models/x/"), "5:15 models.m.source", "is not a normalized path",
     "write it as /models/x"),
    ("download-dir-relative", model("{download_dir: cache}"), "5:60 models.m.engine_args.download_dir",
     "'cache' is not an absolute path", "/srv/models"),
    # 3. flag smuggling into ExecStart
    ("flag-in-string", model('{tokenizer: "--trust-remote-code"}'), "5:57 models.m.engine_args.tokenizer",
     "starts with '-', so the engine would read it as another flag", "vllm flag --tokenizer"),
    ("flag-in-list", model('{served_model_name: [a, "--port", "22"]}'),
     "5:69 models.m.engine_args.served_model_name[1]", "item 1 starts with '-'", "--served-model-name"),
    ("flag-in-json-string", model('{compilation_config: "-O3"}'),
     "5:66 models.m.engine_args.compilation_config", "starts with '-'", "--compilation-config"),
    ("flag-in-revision", HOST + 'models:\n  m: {source: org/m, hosts: a, revision: "--x"}\n',
     "5:42 models.m.revision", "does not start with '-'", "revision"),
    # 4. credentials in URLs
    ("index-url-password", HOST + 'defaults: {engine: {index_url: "https://u:s3cret@mirror/simple"}}\n',
     "4:32 defaults.engine.index_url", "may not carry a user name or password", "index_credentials"),
    ("index-url-token-user", HOST + 'defaults: {engine: {index_url: "https://tok@mirror/simple"}}\n',
     "4:32 defaults.engine.index_url", "may not carry a user name or password", "index_credentials"),
    ("url-password-in-vars", HOST.replace("count: 8}", "count: 8}, vars: {mirror: 'https://u:p@m/x'}"),
     "3:77 hosts.a.vars.mirror", "looks like a literal secret (URL with a password)", "secrets:"),
    ("jump-host-password", ssh('jump_host: "ops:pw@bastion"'), "3:43 hosts.a.ssh.jump_host",
     "jump_host carries a password", "identity_file"),
    ("index-credentials-unknown", HOST + "defaults: {engine: {index_url: 'https://m/s', "
     "index_credentials: {secret: mirror}}}\n", "4:75 defaults.engine.index_credentials.secret",
     "unknown secret 'mirror'", "secrets:"),
    # 5. host addresses, users, jump hosts
    ("address-semicolon", address("10.0.0.1;reboot"), "3:16 hosts.a.address", "(it contains ';')", "IPv6"),
    ("address-subshell", address("$(id)"), "3:16 hosts.a.address", "(it contains '$')", "DNS name"),
    ("address-backtick", address("`id`"), "3:16 hosts.a.address", "(it contains '`')", "DNS name"),
    ("address-space", address("a b"), "3:16 hosts.a.address", "(it contains ' ')", "DNS name"),
    ("address-paren", address("a(b)"), "3:16 hosts.a.address", "(it contains '(')", "DNS name"),
    ("address-option", address("-oProxyCommand=sh"), "3:16 hosts.a.address", "starts with '-'", "DNS name"),
    ("address-bad-ipv4", address("999.1.1.1"), "3:16 hosts.a.address", "not a valid IPv4 address",
     "0-255"),
    ("address-bracketed-ipv4", address("[10.0.0.1]"), "3:16 hosts.a.address", "is not an IPv6 address",
     "IPv6"),
    ("address-ipv6-zone", address("fe80::1%$(id)"), "3:16 hosts.a.address", "(it contains '%')", "IPv6"),
    ("user-option", ssh('user: "-oX"'), "3:38 hosts.a.ssh.user", "not a valid user name", "starts with"),
    ("user-semicolon", ssh('user: "ops;id"'), "3:38 hosts.a.ssh.user", "not a valid user name", "letters"),
    ("jump-host-bad-port", ssh("jump_host: bastion:nope"), "3:43 hosts.a.ssh.jump_host",
     "port 'nope' is not a number", "[user@]host[:port]"),
    ("jump-host-option", ssh('jump_host: "-oProxyCommand=x"'), "3:43 hosts.a.ssh.jump_host",
     "starts with '-'", "DNS name"),
    ("jump-host-ipv6", ssh('jump_host: "[::1]:22"'), "3:43 hosts.a.ssh.jump_host",
     "cannot be an IPv6 address", "DNS name"),
    # 6. host set and names
    ("no-hosts", "vllmctl: 1\nhosts: {}\n", "2:8 hosts", "no hosts", "add a host"),
    ("no-hosts-key", "vllmctl: 1\nmodels: {}\n", "1:1 vllmctl", "defines no hosts", "add `hosts:`"),
    ("same-address", "vllmctl: 1\nhosts:\n  a: {address: '2001:db8::1'}\n  b: {address: '2001:0db8::1'}\n",
     "4:16 hosts.b.address", "same address and SSH port as host 'a'", "remove the duplicate"),
    ("host-case", "vllmctl: 1\nhosts:\n  gpu-01: {address: 10.0.0.1}\n  GPU-01: {address: 10.0.0.2}\n",
     "4:3 hosts.GPU-01", "differs from host 'gpu-01' only in case", "rename one"),
    ("model-case", HOST + "models:\n  Llama: {source: org/m, hosts: a}\n  llama: {source: org/m, hosts: a, "
     "port: 9000}\n", "6:3 models.llama", "differs from model 'Llama' only in case", "rename one"),
    # 7. types and values
    ("int-beyond-64-bits",
     HOST + "models:\n  m: {source: org/m, hosts: a, max_model_len: 99999999999999999999}\n",
     "5:47 models.m.max_model_len", "does not fit in 64 bits", "typo"),
    ("integral-float-port", HOST + "models:\n  m: {source: org/m, hosts: a, port: 8000.0}\n",
     "5:38 models.m.port", "expected an integer, got number 8000.0", "8000, not 8000.0"),
    ("nan-sampling", HOST + "models:\n  m: {source: org/m, hosts: a, sampling: {temperature: .nan}}\n",
     "5:56 models.m.sampling.temperature", "nan is not a number", "finite"),
    ("inf-slo", HOST + "models:\n  m: {source: org/m, hosts: a, slo: {ttft_p99_ms: .inf}}\n",
     "5:51 models.m.slo.ttft_p99_ms", "inf is not a number", "finite"),
    ("nan-in-json-flag", model("{override_generation_config: {temperature: .nan}}"),
     "5:88 models.m.engine_args.override_generation_config.temperature", "nan is not a number", "finite"),
    ("octal-branch", HOST + "defaults: {driver: {branch: 0550}}\n", "4:29 defaults.driver.branch",
     "got integer 360", 'quote it, e.g. branch: "580"'),
    ("python-tag-on-list", HOST + "defaults: {vars: {t: !!python/tuple [a]}}\n", "4:22 defaults.vars.t",
     "unsupported YAML tag !!python/tuple on a list", "remove the tag"),
    ("set-tag-on-mapping", HOST + "defaults: {vars: {s: !!set {a}}}\n", "4:22 defaults.vars.s",
     "unsupported YAML tag !!set on a mapping", "remove the tag"),
    ("custom-tag", HOST + "defaults: {vars: {c: !custom {x: 1}}}\n", "4:22 defaults.vars.c",
     "unsupported YAML tag !custom", "remove the tag"),
    ("bidi-override", HOST + 'defaults: {vars: {note: "admin\u202etxt.exe"}}\n', "4:25 defaults.vars.note",
     "U+202E right-to-left override", "remove it"),
    ("zero-width-key", HOST + 'defaults: {vars: {"k\u200bey": 1}}\n', "4:19 defaults.vars.k\\u200bey",
     "U+200B zero width space", "remove it"),
    # 9. SGLang's API key
    ("sglang-api-key", HOST.replace("count: 8}", "count: 8}, engine: {name: sglang}")
     + "models:\n  m: {source: org/m, hosts: a, engine_args: {api_key: {secret: k}}}\n"
     + "secrets: {k: {env: K}}\n",
     "5:46 models.m.engine_args.api_key", "SGLang takes the key only on its command line", "proxy"),
]  # fmt: skip


def only_problem(workdir: Path, text: str) -> Problem:
    (workdir / "inv.yml").write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(InvalidInputError) as caught:
        load_inventory("inv.yml")
    found = caught.value.problems
    assert len(found) == 1, [p.render() for p in found]
    return found[0]


@pytest.mark.parametrize(
    ("text", "where", "message", "hint"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_hostile_inventory_is_refused_at_its_line(
    workdir: Path, text: str, where: str, message: str, hint: str
) -> None:
    problem = only_problem(workdir, text)
    assert f"{problem.location.line}:{problem.location.column} {problem.location.path}" == where
    assert problem.location.file == "inv.yml"
    assert message in problem.message
    assert hint in problem.hint


def test_messages_never_carry_unprintable_characters(workdir: Path) -> None:
    problem = only_problem(workdir, HOST + 'defaults: {vars: {"a\u202eb\\e[2J": 1}}\n')  # \e: ESC in YAML
    rendered = problem.render()
    assert "\u202e" not in rendered and "\x1b" not in rendered
    assert "defaults.vars.a\\u202eb\\x1b[2J" in rendered


def test_a_password_in_an_index_url_is_never_echoed(workdir: Path) -> None:
    problem = only_problem(workdir, HOST + 'defaults: {engine: {index_url: "https://u:s3cret@m/simple"}}\n')
    assert "s3cret" not in problem.render()
