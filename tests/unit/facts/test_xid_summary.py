"""Every Xid since boot is judged: the host's summary (one line per GPU and Xid, the newest, with its count),
run for real through POSIX awk on a journal where one Xid 79 is followed by 60 Xid 13 lines, the aftermath
that pushed it out of the last-50-lines window the fact read before."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from vllmctl.facts.gpu_health import XID_SUMMARY, parse_xid
from vllmctl.ops.gpu_findings import xid_findings

FELL_OFF = "NVRM: Xid (PCI:0000:18:00): 79, pid=1101, name=nvc:[driver], GPU has fallen off the bus."
AFTERMATH = "NVRM: Xid (PCI:0000:18:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception on (GPC 0)"
RECOVERY = "NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed from 0x0 (None) to 0x{n} ({what})"


@pytest.mark.parametrize("awk", [a for a in ("mawk", "gawk", "awk") if shutil.which(a)])
def test_an_xid_79_buried_under_60_xid_13_lines_still_refuses_the_host(awk: str) -> None:
    journal = [FELL_OFF, *(AFTERMATH.format(pid=2000 + i) for i in range(60))]
    journal += [RECOVERY.format(n=1, what="GPU Reset Required"), RECOVERY.format(n=0, what="None")]
    script = XID_SUMMARY.replace("awk ", f"{awk} ", 1)
    done = subprocess.run(
        ["sh", "-c", script], input="\n".join(journal) + "\n", capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    xids = sorted((x for x in map(parse_xid, done.stdout.splitlines()) if x), key=lambda x: x["xid"])
    assert [(x["xid"], x["count"]) for x in xids] == [(13, 60), (79, 1), (154, 2)]
    assert xids[0]["text"].startswith("pid=2059,")  # the newest line of each
    findings = xid_findings(xids)
    # 79 demands a reset; 13 is an application error; 154's newest line says no recovery is needed now
    assert [f.evidence for f in findings] == [
        "NVRM: Xid 79 (GPU has fallen off the bus) on PCI 0000:18:00 since boot: "
        "pid=1101, name=nvc:[driver], GPU has fallen off the bus."
    ]


def test_a_count_is_said_when_the_xid_came_more_than_once() -> None:
    line = parse_xid(f"7\t{FELL_OFF}")
    assert line is not None and line["count"] == 7
    assert ", 7 times: " in xid_findings([line])[0].evidence
