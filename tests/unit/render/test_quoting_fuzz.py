"""Fuzz: every unit, env file and remote command rendered from hostile strings (quotes, `$`, backticks, `%`,
newlines, `;`, spaces, unicode, a leading `-`), built in memory past `validate` (defence in depth). Each
value either stays exactly itself for its target (no new argv word, env line, unit setting or shell word,
no path outside its root) or the render is refused, and refused exactly when it has no safe spelling."""

from __future__ import annotations

import ipaddress
import os
import posixpath
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from systemd_syntax import env_file, environment_assignments, exec_argv, resolve_specifiers, unit_settings

from vllmctl.facts.disk import disk_free_command, manifest_command
from vllmctl.facts.state import paths_command
from vllmctl.inventory.model import (
    ClusterSpec,
    DriverSpec,
    EngineSpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    SecretRef,
    SshSettings,
)
from vllmctl.multinode.units import node_environment, ray_start_argv, render_ray_unit
from vllmctl.ops import Command, OpError, Upload
from vllmctl.ops.env_reader import READ_ENV
from vllmctl.ops.model_stage import MODEL_DOWNLOAD, MODEL_SYNC, PushFile, delete_under
from vllmctl.ops.release import journal_tail_command
from vllmctl.render.quoting import QuotingError, confined_path, http_url
from vllmctl.render.templates import RenderError
from vllmctl.tasks import desired
from vllmctl.tasks.desired import HostContext, ModelPlan, Replica, render_env, render_unit
from vllmctl.transport import SshTransport

PIECES = [
    '"', "'", "$", "$HOME", "${HOME}", "$(id)", "`id`", "%", "%n", "%%", "\n", "\r", "\t", ";", " ", "\\",
    "-", "--port 22", "é", "✓", "中", "#", "=", "&&", "|", "*", "~", "\x00", "\x1b", "\u2028", "\ufeff",
    "/", "..", "a", "x", "/srv/m",
]  # fmt: skip
hostile = st.one_of(st.text(max_size=24), st.lists(st.sampled_from(PIECES), max_size=8).map("".join))
names = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), hostile)
# VLLMCTL_FUZZ_EXAMPLES=5000 for a longer hunt; 150 keeps the unit suite fast
EXAMPLES = int(os.environ.get("VLLMCTL_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REFUSED = (QuotingError, RenderError)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]+")
VENV = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,127}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _host(**vars: Any) -> Host:
    return Host("h", "10.0.0.1", SshSettings(), GpuSpec("H100-80GB", 2), DriverSpec(), EngineSpec(), vars)


def _context(model: ModelDeployment, host: Host, secrets: Mapping[str, str] = {}) -> HostContext:
    refs = {name: SecretRef(name, env=name.upper()) for name in secrets}  # each secret reaches every model
    inv = Inventory("inv.yml", {"h": host}, {}, {model.name: model}, refs)
    plan = ModelPlan(dict(model.engine_args), (Replica(0, 8000, (0, 1)),))
    return HostContext(inv, host, {model.name: plan}, dict(secrets))


def _settings(text: str) -> list[tuple[str, str, str]]:
    return unit_settings(text)


# --- systemd units ---------------------------------------------------------------------------------------

KEYS = [
    "Description", "After", "Wants", "StartLimitIntervalSec", "Type", "User", "Group", "WorkingDirectory",
    "EnvironmentFile", "Environment", "ExecStart", "Restart", "RestartSec", "TimeoutStartSec",
    "TimeoutStopSec", "KillSignal", "LimitNOFILE", "LimitMEMLOCK", "StandardOutput", "StandardError",
    "SyslogIdentifier", "WantedBy",
]  # fmt: skip


@FUZZ
@given(
    name=st.one_of(st.just("m"), hostile),
    source=hostile,
    revision=hostile,
    value=hostile,
    items=st.lists(hostile, max_size=3),
    version=st.one_of(st.just("0.11.0"), hostile),
    engine=st.sampled_from(["vllm", "sglang"]),
)
def test_a_unit_runs_exactly_the_intended_argv_and_nothing_else(
    name: str, source: str, revision: str, value: str, items: list[str], version: str, engine: str
) -> None:
    spec = EngineSpec(engine, version)  # type: ignore[arg-type]
    args = {"tokenizer": value, "custom_flag": value, "custom_list": items}
    model = ModelDeployment(name, source, ("h",), engine=spec, revision=revision or None, engine_args=args)
    ctx = _context(model, _host())
    replica = ctx.plan(model).replicas[0]
    must_refuse = (
        not UNIT_NAME.fullmatch(f"vllmctl-{name}-0.service")
        or not VENV.fullmatch(f"{engine}-{version}")
        or any("\0" in v for v in (source, revision, value, *items))
        or name.endswith("\\")
    )
    try:
        text = render_unit(ctx, model, replica)
    except REFUSED:
        assert must_refuse
        return
    assert not must_refuse
    found = _settings(text)
    assert [key for _, key, _ in found] == KEYS  # no setting added, none lost
    values = {key: value for _, key, value in found}
    argv = exec_argv(values["ExecStart"])
    assert argv == desired.exec_argv(model, spec, ctx.plan(model), replica)
    assert argv[argv.index("--model-path" if engine == "sglang" else "--model") + 1] == source
    assert argv[argv.index("--tokenizer") + 1] == value and argv[argv.index("--custom-flag") + 1] == value
    assert environment_assignments(values["Environment"]) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert f"vllmctl {name} replica 0 " in resolve_specifiers(values["Description"])


@FUZZ
@given(
    extra=st.dictionaries(names, hostile, max_size=3),
    interface=st.one_of(st.none(), hostile),
    group=st.one_of(st.just("big"), hostile),
)
def test_ray_units_pass_every_environment_value_unchanged(
    extra: dict[str, str], interface: str | None, group: str
) -> None:
    cluster = ClusterSpec(group, ("a", "b"), interface or None)
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2"}
    must_refuse = (
        not UNIT_NAME.fullmatch(f"vllmctl-ray-{group}.service")
        or group.endswith("\\")  # unit_setting refuses what could continue a line, wherever it stands
        or any(not ENV_NAME.fullmatch(k) for k in extra)
        or any("\0" in v for v in (*extra.values(), interface or ""))
    )
    try:
        text = render_ray_unit(cluster, EngineSpec(), "b", addresses, 8, extra)
    except REFUSED:
        assert must_refuse
        return
    assert not must_refuse
    found = _settings(text)
    environment: dict[str, str] = {}
    for _, key, value in found:
        if key == "Environment":
            environment |= environment_assignments(value)
    assert environment == node_environment(cluster, "10.0.0.2", extra)
    (exec_start,) = [value for _, key, value in found if key == "ExecStart"]
    assert exec_argv(exec_start) == ray_start_argv(cluster, EngineSpec(), "10.0.0.2", "10.0.0.1", False, 8)


# --- env files -------------------------------------------------------------------------------------------


def _no_spelling(value: str) -> bool:
    return any(
        ch in "\0\n\r\ufeff" or 0xFDD0 <= ord(ch) < 0xFDF0 or (ord(ch) & 0xFFFE) == 0xFFFE for ch in value
    )


@FUZZ
@given(
    env=st.dictionaries(names, hostile, max_size=4),
    secrets=st.dictionaries(names, hostile, max_size=3),
    key=hostile,
)
def test_an_env_file_holds_exactly_the_intended_variables(
    env: dict[str, str], secrets: dict[str, str], key: str, tmp_path_factory: Any
) -> None:
    model = ModelDeployment("m", "/srv/m", ("h",), engine_args={"api_key": {"secret": "api_key"}})
    ctx = _context(model, _host(env=env), {**secrets, "api_key": key})
    intended = {"HF_HOME": "/var/lib/vllmctl/hf", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    intended |= {"HF_HUB_CACHE": "/var/lib/vllmctl/models/hub", "HF_HUB_OFFLINE": "1"}
    intended |= env | {name.upper(): v for name, v in {**secrets, "api_key": key}.items()}
    intended["VLLM_API_KEY"] = key
    must_refuse = any(not ENV_NAME.fullmatch(k) or _no_spelling(v) for k, v in intended.items())
    try:
        text = render_env(ctx, model)
    except REFUSED:
        assert must_refuse
        return
    assert not must_refuse
    pairs = env_file(text)
    assert len(pairs) == len(intended) and dict(pairs) == intended  # no line added, none lost or changed
    scope: dict[str, Any] = {}
    exec(READ_ENV, scope)  # the reader the host-side helpers embed
    path = tmp_path_factory.mktemp("env") / "m.env"
    path.write_text(text)
    assert scope["read_env"](str(path)) == intended
    shown = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; printf "%s" "$VLLM_API_KEY"', "-", str(path)], capture_output=True
    )
    assert shown.stdout.decode() == key  # a shell sourcing it would not expand anything either


# --- remote commands -------------------------------------------------------------------------------------


def _tokens(script: str) -> list[str]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    return list(lexer)


def _same_shape(render: Any, values: Sequence[str]) -> None:
    """`render(values)` lexes as `render(placeholders)` with each placeholder replaced: the values moved no
    word boundary, operator or redirection; and bash accepts the script."""
    marks = [f"Pq{i}z" for i in range(len(values))]
    hostile_script, plain = render(list(values)), _tokens(render(marks))
    for mark, value in zip(marks, values, strict=True):
        plain = [token.replace(mark, value) for token in plain]
    assert _tokens(hostile_script) == plain
    assert subprocess.run(["bash", "-n", "-c", hostile_script]).returncode == 0


def _no_nul(values: Sequence[str]) -> bool:
    return all("\0" not in v for v in values)


@FUZZ
@given(argv=st.lists(hostile, min_size=1, max_size=5))
def test_an_argv_command_is_exactly_its_words_to_bash(argv: list[str]) -> None:
    if not _no_nul(argv):
        return
    command = Command(argv=("printf", "%s\\0", *argv))
    assert shlex.split(command.render()) == list(command.argv)
    out = subprocess.run(["bash", "-c", command.render()], capture_output=True).stdout
    assert out.decode(errors="surrogateescape").split("\0")[:-1] == argv


@FUZZ
@given(command=hostile, user=st.sampled_from(["ops", "root"]))
def test_sudo_and_timeout_wrapping_keep_the_command_one_word(command: str, user: str) -> None:
    if "\0" in command:
        return
    transport = SshTransport(Host("h", "10.0.0.1", SshSettings(user=user), None, DriverSpec(), EngineSpec()))
    words = shlex.split(transport._wrap(command, sudo=True, timeout=30))
    if user != "root":
        assert words[:3] == ["sudo", "-n", "--"]
        words = words[3:]
    assert words == ["timeout", "-k", "5", "30", "sh", "-c", command]
    untimed = transport._wrap(command, sudo=True, timeout=None)
    if user != "root":
        assert shlex.split(untimed) == ["sudo", "-n", "--", "sh", "-c", command]
    else:
        assert untimed == command


@FUZZ
@given(paths=st.lists(hostile, min_size=1, max_size=3))
def test_fact_commands_keep_each_argument_one_word(paths: list[str]) -> None:
    if not _no_nul(paths):
        return
    for build in (paths_command, disk_free_command, manifest_command):
        _same_shape(lambda values, build=build: build(tuple(values)), paths)


@FUZZ
@given(dest=hostile, file_names=st.lists(hostile, min_size=1, max_size=3), gone=st.lists(hostile, max_size=3))
def test_model_sync_writes_and_deletes_only_inside_its_destination(
    dest: str, file_names: list[str], gone: list[str]
) -> None:
    dest = "/" + dest.lstrip("/")
    files = [
        {"name": n, "source": f"/c/{i}", "sha256": "a" * 64, "size": 1} for i, n in enumerate(file_names)
    ]
    recorded = {n: {"sha256": "e" * 64, "size": 1} for n in gone}
    facts = {"model_manifests": {dest: {"exists": True, "recorded": recorded, "seen": {}}}, "disk_free": {}}
    clean_dest = posixpath.normpath(dest) == dest and not dest.startswith("//") and not CONTROL.search(dest)
    try:
        step = MODEL_SYNC({"dest": dest, "files": files}, facts)
    except OpError:  # the controller's own data is wrong: refused before anything runs
        assert not clean_dest or not all(_relative_inside(n) for n in file_names)
        return
    assert clean_dest and all(_relative_inside(n) for n in file_names)
    root = dest.rstrip("/") + "/"
    for action in step.actions:
        if isinstance(action, Upload | PushFile):
            assert action.path.startswith(root) and posixpath.normpath(action.path) == action.path
    assert len(step.warnings) == len({n for n in gone if not _relative_inside(n)})  # host data: warned
    deleted = sorted({n for n in gone if _relative_inside(n) and n not in file_names})
    if deleted:
        _same_shape(lambda values: delete_under(values[0], values[1:]).render(), [dest, *deleted])


def _relative_inside(name: str) -> bool:
    """An oracle independent of `confined_path`: a relative, normalized name with no `..` or control."""
    parts = name.split("/")
    normal = all(part not in ("", ".", "..") for part in parts)
    return bool(name) and normal and not CONTROL.search(name)


@FUZZ
@given(repo=hostile, revision=hostile, env=hostile)
def test_the_hub_download_command_keeps_each_value_one_word(repo: str, revision: str, env: str) -> None:
    if not _no_nul([repo, revision, env]):
        return

    def render(values: list[str]) -> str:
        args = {"model": "m", "repo": values[0], "revision": values[1], "venv": "/v", "env_file": values[2]}
        step = MODEL_DOWNLOAD(args, {"paths": {}, "disk_free": {}})
        return "\n".join(a.render() for a in step.actions if isinstance(a, Command))

    _same_shape(render, [repo, revision, env])


@FUZZ
@given(units=st.lists(hostile, min_size=1, max_size=3))
def test_the_journal_command_keeps_each_unit_one_word(units: list[str]) -> None:
    if _no_nul(units):  # the command sorts its units: sorted and distinct, they keep the placeholders' order
        _same_shape(lambda values: journal_tail_command(values).render(), sorted(set(units)))


@FUZZ
@given(name=hostile)
def test_host_paths_never_leave_their_root(name: str) -> None:
    for build, intended in (
        (desired.env_path, f"/etc/vllmctl/{name}.env"),
        (
            lambda n: f"/etc/systemd/system/{desired.unit_name(n, 0)}",
            f"/etc/systemd/system/vllmctl-{name}-0.service",
        ),
    ):
        try:
            path = build(name)
        except QuotingError:
            continue
        assert path == intended and "/" not in name and posixpath.normpath(path) == path
    try:
        joined = confined_path("/srv/m", name)
    except QuotingError:
        return
    assert joined.startswith("/srv/m/") and posixpath.normpath(joined) == joined


@FUZZ
@given(address=hostile, segments=st.lists(hostile, max_size=3))
def test_a_url_keeps_its_host_and_path_segments(address: str, segments: list[str]) -> None:
    from urllib.parse import unquote, urlsplit

    try:
        url = http_url(address, 8000, "/".join(segments))
    except QuotingError:
        return
    parts = urlsplit(url)
    host = address.removeprefix("[").removesuffix("]")
    assert (parts.port, parts.query, parts.fragment) == (8000, "", "")
    assert parts.hostname == (str(ipaddress.IPv6Address(host)) if ":" in host else host.lower())
    assert [unquote(s) for s in parts.path.split("/")[1:]] == [s for s in "/".join(segments).split("/") if s]


def test_the_fuzz_sees_refusals_and_passes_alike() -> None:
    # guards against a strategy that only ever produces one of the two outcomes
    assert _no_spelling("a\nb") and not _no_spelling("a $b `c` \"d\" 'e' %f \\g")
    assert Path(__file__).read_text().count("@FUZZ") >= 10
