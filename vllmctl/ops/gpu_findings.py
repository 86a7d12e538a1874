"""The GPU health gate's findings, pure: the record each failed check makes, and the Xids since boot that
NVIDIA's Xid catalog says need a GPU reset or a reboot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Xids whose immediate action in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/
# analyzing-xid-catalog.html) is a GPU reset or a reboot (RESET_GPU, RESTART_BM, the Xid 48 workflow):
# seen since boot, the GPU has not been reset since and must not serve.
RESET_XIDS: Mapping[int, str] = {
    48: "double-bit (uncorrectable) ECC error",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
# Xid 154 states the recovery the driver now requires; these need a reset or a reboot
XID_154_RESET = ("Reset Required", "Reboot Required", "Drain and Reset")


@dataclass(frozen=True)
class Finding:
    check: str
    evidence: str
    fix: str

    def render(self) -> str:
        return f"{self.check}: {self.evidence} (fix: {self.fix})"


def xid_findings(xids: Iterable[Mapping[str, Any]]) -> list[Finding]:
    found: list[Finding] = []
    for xid in xids:
        code, text = int(xid["xid"]), str(xid.get("text", ""))
        now = text.rsplit(" to ", 1)[
            -1
        ]  # "recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
        reset_154 = code == 154 and any(words in now for words in XID_154_RESET)
        if code not in RESET_XIDS and not reset_154:
            continue
        what = RESET_XIDS.get(code, "GPU recovery action changed")
        times = int(xid.get("count", 1))
        often = f", {times} times" if times > 1 else ""
        found.append(
            Finding(
                "xid",
                f"NVRM: Xid {code} ({what}) on PCI {xid.get('pci')} since boot{often}: {text}".rstrip(": "),
                "NVIDIA's Xid catalog asks for a GPU reset or reboot: drain the host, reboot it "
                "(or `nvidia-smi -r -i <gpu>`), and replace the GPU if the Xid comes back",
            )
        )
    return found
