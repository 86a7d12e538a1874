"""The quoting functions, one per target, against reference readers of that target: systemd's own rules
(systemd_syntax.py), bash and shlex for shell words, urllib for URLs, posixpath for confined paths."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from systemd_syntax import Unsafe, env_file, environment_assignments, exec_argv, unit_settings

from vllmctl.render.quoting import (
    QuotingError,
    confined_path,
    env_file_line,
    host_path,
    http_url,
    redact_text,
    shell_join,
    shell_resolves_under,
    shell_word,
    unit_environment,
    unit_exec,
    unit_exec_word,
    unit_file_name,
    unit_setting,
)

HOSTILE = [
    "",
    " ",
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "$HOME",
    "${HOME}",
    "$$",
    "`id`",
    "$(id)",
    "100%",
    "%n%i",
    "a;b",
    ";",
    "\\;",
    "-x",
    "--port 22",
    "back\\slash\\",
    "tab\there",
    "new\nline",
    "carriage\rreturn",
    "bell\x07",
    "unicode é ✓ 中",
    "\u2028line sep",
    "#comment",
    "=equals=",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_an_exec_start_word_is_exactly_one_argv_word(value: str) -> None:
    argv = ["/opt/v/bin/python", "-m", "vllm", "--model", value, "--tail"]
    assert exec_argv(unit_exec(argv)) == argv


def test_exec_start_doubles_specifiers_and_dollars_and_leaves_plain_words_bare() -> None:
    argv = ["/v/python", "--port", "8000", "--model", "org/M-7B"]
    assert unit_exec(argv) == "/v/python --port 8000 --model org/M-7B"
    assert unit_exec_word("100% $HOME") == '"100%% $$HOME"'
    assert unit_exec_word("") == '""'


@pytest.mark.parametrize("program", ["-/bin/sh", "+/bin/sh", "@x", "python", ""])
def test_exec_start_refuses_a_program_that_is_not_absolute(program: str) -> None:
    # systemd reads a leading - @ : + ! as a prefix (+ runs with full privileges), even from quotes
    with pytest.raises(QuotingError, match="absolute path"):
        unit_exec([program, "x"])


@pytest.mark.parametrize("value", HOSTILE)
def test_an_environment_assignment_keeps_its_value_and_dollar_signs(value: str) -> None:
    line = unit_environment("VLLM_X", value)
    assert environment_assignments(line) == {"VLLM_X": value}  # `$` is literal there: never doubled


def test_plain_environment_assignments_stay_bare() -> None:
    assert unit_environment("RAY_USAGE_STATS_ENABLED", "0") == "RAY_USAGE_STATS_ENABLED=0"
    assert unit_environment("A", "x$y") == '"A=x$y"'


@pytest.mark.parametrize("name", ["hf-token", "hf.token", "1key", "MY VAR", "A=B", "", "a\nb"])
def test_invalid_variable_names_are_refused(name: str) -> None:
    with pytest.raises(QuotingError):
        unit_environment(name, "v")
    with pytest.raises(QuotingError):
        env_file_line(name, "v")


@pytest.mark.parametrize("value", [v for v in HOSTILE if "\n" not in v and "\r" not in v])
def test_an_env_file_line_reads_back_as_exactly_its_value(value: str, tmp_path: Path) -> None:
    text = f"# managed\n{env_file_line('KEY', value)}\n{env_file_line('NEXT', 'n')}\n"
    assert env_file(text) == [("KEY", value), ("NEXT", "n")]
    # the same text is a POSIX shell file with the same meaning (no expansion happens inside it)
    path = tmp_path / "m.env"
    path.write_text(text)
    script = f'set -a; . {shlex.quote(str(path))}; printf "%s" "$KEY"'
    shown = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={}, check=True)
    assert shown.stdout == value


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\0b", "\ufeffbom", "x\ufdd0", "x\uffff"])
def test_env_file_values_that_have_no_spelling_are_refused(value: str) -> None:
    with pytest.raises(QuotingError, match="cannot go in an env file"):
        env_file_line("KEY", value)


@pytest.mark.parametrize("value", ["vllmctl m", "100% done", "a\\b", "é"])
def test_other_unit_settings_double_specifiers(value: str) -> None:
    text = f"[Unit]\nDescription={unit_setting(value)}\n"
    assert unit_settings(text) == [("Unit", "Description", value.replace("%", "%%"))]


@pytest.mark.parametrize("value", ["a\nExecStartPre=+/bin/sh", "a\rb", "ends\\", "a\x1bb"])
def test_unit_settings_that_would_add_or_join_lines_are_refused(value: str) -> None:
    with pytest.raises(QuotingError):
        unit_setting(value)


@pytest.mark.parametrize("name", ["vllmctl-m-0.service", "vllmctl-ray-g.service"])
def test_unit_names(name: str) -> None:
    assert unit_file_name(name) == name


@pytest.mark.parametrize("name", ["vllmctl-../x-0.service", "a b.service", "x.service\n", "x", ".service"])
def test_bad_unit_names_are_refused(name: str) -> None:
    with pytest.raises(QuotingError):
        unit_file_name(name)


@pytest.mark.parametrize("value", HOSTILE)
def test_a_shell_word_is_one_word_to_shlex_and_to_bash(value: str) -> None:
    assert shlex.split(shell_join(["printf", "%s\\0", value, "end"])) == ["printf", "%s\\0", value, "end"]
    out = subprocess.run(["bash", "-c", shell_join(["printf", "%s\\0", value, "end"])], capture_output=True)
    assert out.stdout.decode() == f"{value}\0end\0"


def test_a_nul_has_no_shell_spelling() -> None:
    with pytest.raises(QuotingError):
        shell_word("a\0b")


def test_urls_quote_path_segments_and_bracket_ipv6() -> None:
    assert http_url("10.0.0.1", 8000, "/v1/models") == "http://10.0.0.1:8000/v1/models"
    assert http_url("fd00::1", 8000) == "http://[fd00::1]:8000"
    assert http_url("h", 1, "a b/c?d#e%") == "http://h:1/a%20b/c%3Fd%23e%25"
    for bad in ("evil.com/x?", "a@b", "a b", "x\ny"):
        with pytest.raises(QuotingError):
            http_url(bad, 80)
    with pytest.raises(QuotingError):
        http_url("h", 70000)


def test_url_credentials_are_redacted_for_display() -> None:
    assert redact_text("https://user:p%40ss@mirror:8443/simple") == "https://***@mirror:8443/simple"
    assert redact_text("https://mirror/simple") == "https://mirror/simple"
    said = "ERROR: 401 from https://u:secret@m.example/simple/x and http://tok@h/p"
    assert redact_text(said) == "ERROR: 401 from https://***@m.example/simple/x and http://***@h/p"


@pytest.mark.parametrize("path", ["/srv/m", "/", "/a b/c'd$e"])
def test_host_paths(path: str) -> None:
    assert host_path(path) == path


@pytest.mark.parametrize("path", ["srv/m", "/srv/../etc", "/srv/m/", "//srv", "/srv/./m", "/a\nb", ""])
def test_host_paths_that_are_not_absolute_and_normalized_are_refused(path: str) -> None:
    with pytest.raises(QuotingError):
        host_path(path)


@pytest.mark.parametrize("name", ["a", "sub/b.bin", "it's $x;", "..a", "a..b"])
def test_names_inside_their_root(name: str) -> None:
    assert confined_path("/srv/m", name) == f"/srv/m/{name}"


@pytest.mark.parametrize(
    "name", ["../../etc/sudoers", "/etc/shadow", "..", ".", "", "a/../../x", "a/../b", "./a", "a//b", "a\nb"]
)
def test_names_that_leave_their_root_or_are_not_normalized_are_refused(name: str) -> None:
    with pytest.raises(QuotingError, match="not a relative path inside /srv/m"):
        confined_path("/srv/m", name)


def test_the_filesystem_root_confines_too() -> None:
    assert confined_path("/", "etc/x") == "/etc/x"
    with pytest.raises(QuotingError):
        confined_path("/", "/etc/x")


def test_the_reference_reader_catches_what_naive_quoting_lets_through() -> None:
    # the readers are honest: each of these is a hole a careless quoting function would leave
    with pytest.raises(Unsafe):
        exec_argv('/v/python "$HOME"')
    with pytest.raises(Unsafe):
        exec_argv("/v/python 100%n")
    with pytest.raises(Unsafe):
        exec_argv("/v/python ; /bin/sh")
    assert exec_argv('/v/python "a b"') == ["/v/python", "a b"]
    assert env_file('K="a\\nb"\n') == [("K", "a\\nb")]  # no \n escape in env files: a newline is refused
    assert environment_assignments('"A=$$x"') == {"A": "$$x"}  # doubling `$` there corrupts the value


def test_the_host_side_confinement_test_follows_links_planted_in_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "m", tmp_path / "etc"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)

    def inside(path: Path) -> bool:
        return subprocess.run(["bash", "-c", shell_resolves_under(str(path), str(root))]).returncode == 0

    assert inside(root / "a.bin") and inside(root / "sub" / "w.bin") and inside(root / "new" / "x")
    assert not inside(root / "link" / "shadow") and not inside(tmp_path / "x")
