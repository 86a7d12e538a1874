"""The runtime API, pure: drain/ready commands through socat, and `show stat` parsed to server rows."""

from __future__ import annotations

import pytest

from vllmctl.gateway.runtime import SHOW_STAT, parse_stat, set_state
from vllmctl.render.quoting import QuotingError

HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,type,check_status\n"


def stat_text(*rows: str) -> str:
    return HEADER + "".join(row + "\n" for row in rows)


def test_commands_go_to_the_admin_socket_in_one_session() -> None:
    command = set_state(["tiny/a-8000", "tiny/a-8001"], "drain")
    assert command.render() == (
        "if [ -d /etc/haproxy/vllmctl ] && command -v socat >/dev/null; then ( flock -w 60 9 &&"
        " printf '%s\\n' 'set server tiny/a-8000 state drain; set server tiny/a-8001 state drain'"
        " | socat -t 10 - UNIX-CONNECT:/run/haproxy/admin.sock ) 9>/run/vllmctl-haproxy-state.lock;"
        " else echo @@vllmctl-gateway-not-set-up; fi"
    )
    assert "'show stat'" in SHOW_STAT.render()


def test_a_server_name_that_would_add_a_command_is_refused() -> None:
    with pytest.raises(QuotingError):
        set_state(["tiny/a;shutdown sessions"], "drain")


def test_show_stat_rows_are_servers_only() -> None:
    text = stat_text(
        "tiny,FRONTEND,,,3,5,,9,OPEN,0,",
        "tiny,a-8000,0,0,2,4,,7,UP,2,L7OK",
        "tiny,b-8000,1,1,0,1,,2,DRAIN,2,L7OK",
        "tiny,c-8000,,,0,0,,0,DOWN,2,L4CON",
        "tiny,BACKEND,0,0,2,4,,9,UP,1,",
    )
    found = parse_stat(text)
    assert list(found) == ["tiny/a-8000", "tiny/b-8000", "tiny/c-8000"]
    assert found["tiny/a-8000"].to_json() == {"status": "UP", "sessions": 2, "queued": 0, "check": "L7OK"}
    assert (found["tiny/b-8000"].status, found["tiny/b-8000"].queued) == ("DRAIN", 1)
    assert found["tiny/c-8000"].check == "L4CON"
    assert parse_stat("") == {}


def test_the_status_table_shows_each_server_and_an_unreachable_gateway() -> None:
    from io import StringIO

    from rich.console import Console

    from vllmctl.status.view import gateway_table

    up = {"status": "UP", "sessions": 2, "queued": 0, "check": "L7OK"}
    drain = {"status": "DRAIN", "sessions": 1, "queued": 0, "check": "L7OK"}
    view = {"gw": {"servers": {"tiny/a-8000": up, "tiny/b-8000": drain}}, "gw2": {"error": "timed out"}}
    out = StringIO()
    Console(file=out, width=120, no_color=True).print(gateway_table(view))
    lines = [line.split() for line in out.getvalue().splitlines()]
    assert lines[0] == ["gateway", "model", "server", "state", "sessions", "queued", "check"]
    assert lines[1:] == [
        ["gw", "tiny", "a-8000", "UP", "2", "0", "L7OK"],
        ["gw", "tiny", "b-8000", "DRAIN", "1", "0", "L7OK"],
        ["gw2", "-", "-", "unreachable:", "timed", "out"],
    ]


def test_a_servers_counters_are_read_by_their_names_in_haproxys_header() -> None:
    text = (
        "# pxname,svname,scur,stot,status,type,hrsp_5xx,eresp,ttime,req_tot,chkdown\n"
        "tiny,a-8000,1,40,UP,2,3,1,412,1500,2\n"
    )
    row = parse_stat(text)["tiny/a-8000"]
    assert (row.requests, row.errors, row.ttime_ms, row.downs) == (1500, 4, 412, 2)  # req_tot, not stot
