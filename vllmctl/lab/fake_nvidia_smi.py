#!/usr/bin/python3
"""A stand-in nvidia-smi for lab hosts, answering the real tool's formats from /etc/vllmctl-lab/gpus.json.

Copied into each host as /usr/bin/nvidia-smi; standard library only, since it runs on the host's python3.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

GPUS_JSON = os.environ.get("VLLMCTL_LAB_GPUS", "/etc/vllmctl-lab/gpus.json")
# lines of "PID GPU_INDEX MIB": live processes a test says hold a fake GPU (`--query-compute-apps`)
COMPUTE_APPS = os.environ.get("VLLMCTL_LAB_COMPUTE_APPS", "/run/vllmctl-lab/compute-apps")
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
EXIT_NO_DRIVER = 9
EXIT_NO_DEVICES = 6
EXIT_BAD_ARGS = 2

# field -> (unit shown in the header and after values, or "" for none)
UNITS = {
    "index": "",
    "name": "",
    "uuid": "",
    "count": "",
    "pci.bus_id": "",
    "driver_version": "",
    "compute_cap": "",
    "memory.total": "MiB",
    "memory.used": "MiB",
    "memory.free": "MiB",
    "utilization.gpu": "%",
    "utilization.memory": "%",
    "temperature.gpu": "",
    "power.draw": "W",
    "power.limit": "W",
    "persistence_mode": "",
    "mig.mode.current": "",
}
ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "pci.bus": "pci.bus_id"}


def field_value(field: str, gpu: dict[str, Any], doc: dict[str, Any]) -> str:
    driver = doc["driver"]
    total, used = int(gpu["memory_total_mib"]), int(gpu["memory_used_mib"])
    values: dict[str, str] = {
        "index": str(gpu["index"]),
        "name": gpu["name"],
        "uuid": gpu["uuid"],
        "count": str(len(doc["gpus"])),
        "pci.bus_id": gpu["pci_bus_id"],
        "driver_version": driver["version"],
        "compute_cap": gpu.get("compute_cap", "9.0"),
        "memory.total": str(total),
        "memory.used": str(used),
        "memory.free": str(total - used),
        "utilization.gpu": "0",
        "utilization.memory": "0",
        "temperature.gpu": "30",
        "power.draw": "70.00",
        "power.limit": "700.00",
        "persistence_mode": gpu.get("persistence_mode", "Enabled"),
        "mig.mode.current": gpu.get("mig_mode", "Disabled"),
    }
    return values[field]


def query_gpu(fields_arg: str, format_arg: str, gpus: list[dict[str, Any]], doc: dict[str, Any]) -> int:
    fields = [ALIASES.get(f.strip(), f.strip()) for f in fields_arg.split(",") if f.strip()]
    for field in fields:
        if field not in UNITS:
            sys.stdout.write(f'Field "{field}" is not a valid field to query.\n\n')
            return EXIT_BAD_ARGS
    options = {part.strip() for part in format_arg.split(",")}
    if "csv" not in options:
        sys.stdout.write(f'"{format_arg}" is not a valid format.\n')
        return EXIT_BAD_ARGS
    with_units = "nounits" not in options
    if "noheader" not in options:
        header = [f"{f} [{UNITS[f]}]" if UNITS[f] else f for f in fields]
        sys.stdout.write(", ".join(header) + "\n")
    for gpu in gpus:
        row = []
        for field in fields:
            value = field_value(field, gpu, doc)
            row.append(f"{value} {UNITS[field]}" if with_units and UNITS[field] else value)
        sys.stdout.write(", ".join(row) + "\n")
    return 0


def query_apps(fields_arg: str, gpus: list[dict[str, Any]]) -> int:
    """`--query-compute-apps` (csv, no header, no units, as vllmctl asks): COMPUTE_APPS' live processes."""
    fields = [f.strip() for f in fields_arg.split(",") if f.strip()]
    known = {"pid", "process_name", "used_memory", "used_gpu_memory", "gpu_uuid", "gpu_name", "gpu_bus_id"}
    if not fields or any(f not in known for f in fields):
        sys.stdout.write(f'Field "{fields_arg}" is not a valid field to query.\n\n')
        return EXIT_BAD_ARGS
    by_index = {str(g["index"]): g for g in gpus}
    try:
        with open(COMPUTE_APPS) as handle:
            rows = [line.split() for line in handle if len(line.split()) == 3]
    except FileNotFoundError:
        rows = []
    for pid, index, mib in rows:
        gpu = by_index.get(index)
        if gpu is None:
            continue
        try:
            with open(f"/proc/{pid}/comm") as comm:
                name = comm.read().strip()
        except OSError:
            continue  # the process ended: the real tool lists only live ones
        values = {"pid": pid, "process_name": name, "used_memory": mib, "used_gpu_memory": mib}
        values |= {"gpu_uuid": gpu["uuid"], "gpu_name": gpu["name"], "gpu_bus_id": gpu["pci_bus_id"]}
        sys.stdout.write(", ".join(values[f] for f in fields) + "\n")
    return 0


def list_gpus(gpus: list[dict[str, Any]]) -> int:
    for gpu in gpus:
        sys.stdout.write(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
    return 0


def version(doc: dict[str, Any]) -> int:
    driver = doc["driver"]
    short = ".".join(driver["version"].split(".")[:2])
    sys.stdout.write(
        f"NVIDIA-SMI version  : {driver['version']}\n"
        f"NVML version        : {short}\n"
        f"DRIVER version      : {driver['version']}\n"
        f"CUDA Version        : {driver['cuda_version']}\n"
    )
    return 0


def summary(gpus: list[dict[str, Any]], doc: dict[str, Any]) -> int:
    driver = doc["driver"]
    rule = "+-----------------------------------------+------------------------+----------------------+"
    head = f" NVIDIA-SMI {driver['version']:<22} Driver Version: {driver['version']:<14} "
    head += f"CUDA Version: {driver['cuda_version']:<9}"
    lines = [
        time.strftime("%a %b %d %H:%M:%S %Y"),
        "+" + "-" * 89 + "+",
        f"|{head:<89}|",
        rule.replace("+", "|", 1)[:-1] + "|",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|=========================================+========================+======================|",
    ]
    for gpu in gpus:
        name = gpu["name"][:28]
        memory = f"{gpu['memory_used_mib']}MiB / {gpu['memory_total_mib']}MiB"
        lines.append(f"| {gpu['index']:>3}  {name:<28}   On  | {gpu['pci_bus_id']:>18} Off |{'0':>21} |")
        lines.append(f"| N/A   30C    P0         70W /  700W     | {memory:>22} |      0%      Default |")
        lines.append(rule)
    lines += [
        "",
        "+" + "-" * 89 + "+",
        f"| {'Processes:':<88}|",
        f"|  {'No running processes found':<87}|",
        "+" + "-" * 89 + "+",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def topology(gpus: list[dict[str, Any]]) -> int:
    names = [f"GPU{g['index']}" for g in gpus]
    sys.stdout.write("\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n")
    half = max(1, len(gpus) // 2)
    for row, gpu in enumerate(gpus):
        cells = ["X" if col == row else "NV18" for col in range(len(gpus))]
        numa = 0 if row < half else 1
        cpus = "0-47,96-143" if numa == 0 else "48-95,144-191"
        sys.stdout.write(f"GPU{gpu['index']}\t" + "\t".join(cells) + f"\t{cpus}\t{numa}\t\tN/A\n")
    sys.stdout.write("\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n")
    return 0


def p2p(gpus: list[dict[str, Any]], doc: dict[str, Any]) -> int:
    """`topo -p2p r`: OK between every pair unless gpus.json's `p2p` names the pair ({"0,1": "CNS"})."""
    broken: dict[str, str] = doc.get("p2p") or {}
    names = [g["index"] for g in gpus]
    out = [" \t" + "".join(f"GPU{i}\t" for i in names)]
    for a in names:
        cells = ["X" if a == b else broken.get(f"{a},{b}") or broken.get(f"{b},{a}") or "OK" for b in names]
        out.append(f" GPU{a}\t" + "".join(f"{c}\t" for c in cells))
    legend = ["X    = Self", "OK   = Status Ok", "CNS  = Chipset not supported", "GNS  = GPU not supported"]
    legend += ["TNS  = Topology not supported", "NS   = Not supported", "U    = Unknown"]
    sys.stdout.write("\n".join([*out, "", "Legend:", "", *(f"  {x}" for x in legend)]) + "\n")
    return 0


def fabric(doc: dict[str, Any]) -> tuple[str, str]:
    """(state, status) of the Fabric section: N/A outside an NVLink fabric (no NVSwitches, no NVLink5 switch
    bridges); on an HGX profile what gpus.json says (`fabric`, which the lab's Fabric Manager sets), Not
    Started when it says nothing."""
    if not doc.get("nvswitches") and not doc.get("sw_mng_bridges"):
        return "N/A", "N/A"
    found = doc.get("fabric") or {}
    return str(found.get("state", "Not Started")), str(found.get("status", "N/A"))


def ecc_lines(gpu: dict[str, Any]) -> list[str]:
    volatile = int(gpu.get("ecc_uncorrectable_volatile", 0))
    aggregate = max(volatile, int(gpu.get("ecc_uncorrectable_aggregate", 0)))
    lines = ["    ECC Mode", "        Current : Enabled", "        Pending : Enabled", "    ECC Errors"]
    for scope, count in (("Volatile", volatile), ("Aggregate", aggregate)):
        lines += [
            f"        {scope}",
            "            SRAM Correctable : 0",
            "            SRAM Uncorrectable Parity : 0",
            "            SRAM Uncorrectable SEC-DED : 0",
            "            DRAM Correctable : 0",
            f"            DRAM Uncorrectable : {count}",
        ]
    pending = "Yes" if gpu.get("remapped_rows_pending") else "No"
    lines += [
        "    Retired Pages",
        "        Single Bit ECC : N/A",
        "        Double Bit ECC : N/A",
        "        Pending Page Blacklist : " + ("Yes" if gpu.get("retired_pages_pending") else "N/A"),
        "    Remapped Rows",
        "        Correctable Error : 0",
        f"        Uncorrectable Error : {aggregate}",
        f"        Pending : {pending}",
        "        Remapping Failure Occurred : No",
    ]
    return lines


def pci_lines(gpu: dict[str, Any]) -> list[str]:
    """The PCI section's `GPU Link Info` (gpus.json's `pcie`): Max is the lower of the GPU's generation
    (Device Max) and the slot's (Host Max), as the real tool reports it."""
    pcie = gpu.get("pcie") or {}
    device = int(pcie.get("gen_max", 4))
    host = int(pcie.get("host_gen_max", device))
    current = min(int(pcie.get("gen_current", device)), device, host)  # a link trains at most to both
    width_max = int(pcie.get("width_max", 16))
    width = min(int(pcie.get("width_current", width_max)), width_max)
    return [
        "    PCI",
        f"        Bus Id : {gpu['pci_bus_id']}",
        "        GPU Link Info",
        "            PCIe Generation",
        f"                Max : {min(device, host)}",
        f"                Current : {current}",
        f"                Device Current : {current}",
        f"                Device Max : {device}",
        f"                Host Max : {host}",
        "            Link Width",
        f"                Max : {width_max}x",
        f"                Current : {width}x",
    ]


def fabric_health_lines(gpu: dict[str, Any], doc: dict[str, Any], state: str) -> list[str]:
    """Fabric's `Health` subsection, printed from driver 565 on (a 565 H100 prints `Bandwidth : N/A` there,
    570 adds route-recovery lines): gpus.json's per-GPU `fabric_bandwidth`, else Full once the fabric is
    Completed, N/A outside a fabric."""
    if int(doc["driver"]["branch"]) < 565:
        return []
    default = "Full" if state == "Completed" else "N/A"
    bandwidth = "N/A" if state == "N/A" else gpu.get("fabric_bandwidth") or default
    return ["        Health", f"            Bandwidth : {bandwidth}"]


def query_details(gpus: list[dict[str, Any]], doc: dict[str, Any]) -> int:
    """`nvidia-smi -q`: the real tool's layout (`Key : value`, nested by four spaces) for the fields
    vllmctl reads; values padded to one column as the real tool does."""
    driver = doc["driver"]
    state, status = fabric(doc)
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        "Timestamp : " + time.strftime("%a %b %d %H:%M:%S %Y"),
        f"Driver Version : {driver['version']}",
        f"CUDA Version : {driver['cuda_version']}",
        "",
        f"Attached GPUs : {len(doc['gpus'])}",
    ]
    for gpu in gpus:
        mig = gpu.get("mig_mode", "Disabled")
        out += [
            f"GPU {gpu['pci_bus_id']}",
            f"    Product Name : {gpu['name']}",
            "    Product Brand : NVIDIA",
            f"    Persistence Mode : {gpu.get('persistence_mode', 'Enabled')}",
            "    MIG Mode",
            f"        Current : {mig}",
            f"        Pending : {mig}",
            f"    GPU UUID : {gpu['uuid']}",
            *pci_lines(gpu),
            "    Fabric",
            f"        State : {state}",
            f"        Status : {status}",
            *fabric_health_lines(gpu, doc, state),
            *ecc_lines(gpu),
            "    Temperature",
            "        GPU Current Temp : 30 C",
        ]
    for line in out:
        key, sep, value = line.partition(" : ")
        sys.stdout.write(f"{key:<42}: {value}\n" if sep else line + "\n")
    return 0


# per-link speed as `nvidia-smi nvlink -s` prints it: NVLink4 (H100/H200) 26.562 GB/s, NVLink5 53.125 GB/s
NVLINK_SPEEDS = (("B200", "53.125 GB/s"), ("A100", "25.000 GB/s"))
NVLINK_COUNTERS = (("replay", "Replay Errors"), ("recovery", "Recovery Errors"), ("crc", "CRC Errors"))
ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive"


def nvlink_status(gpus: list[dict[str, Any]]) -> int:
    """`nvlink -s`: each of the GPU's `nvlink_links` at its speed, those in `nvlink_down` `<inactive>`; a GPU
    without links prints its header alone, one with every link down NVML's line instead."""
    for gpu in gpus:
        sys.stdout.write(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
        links = int(gpu.get("nvlink_links") or 0)
        down = {int(link) for link in gpu.get("nvlink_down") or []}
        if links and set(range(links)) <= down:
            sys.stdout.write(ALL_INACTIVE + "\n")
            continue
        speed = next((s for name, s in NVLINK_SPEEDS if name in gpu["name"]), "26.562 GB/s")
        for link in range(links):
            sys.stdout.write(f"\t Link {link}: {'<inactive>' if link in down else speed}\n")
    return 0


def nvlink_errors(gpus: list[dict[str, Any]]) -> int:
    """`nvlink -e`: Replay, Recovery and CRC counters per link, a blank line between links; gpus.json's
    `nvlink_errors` ({"3": {"crc": 12}}) sets them."""
    for gpu in gpus:
        sys.stdout.write(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
        counts = gpu.get("nvlink_errors") or {}
        links = int(gpu.get("nvlink_links") or 0)
        for link in range(links):
            mine = counts.get(str(link)) or {}
            for key, label in NVLINK_COUNTERS:
                sys.stdout.write(f"\t Link {link}: {label}: {int(mine.get(key, 0))}\n")
            if link < links - 1:
                sys.stdout.write("\n")
    return 0


def nvlink(args: list[str], gpus: list[dict[str, Any]]) -> int:
    if "-s" in args or "--status" in args:
        return nvlink_status(gpus)
    if "-e" in args or "--errorcounters" in args:
        return nvlink_errors(gpus)
    sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi nvlink -h' for help.\n")
    return EXIT_BAD_ARGS


def make_devices(doc: dict[str, Any]) -> int:
    """`--lab-make-devices` (a lab boot unit runs it): the NVSwitch device nodes an HGX board's driver
    creates, as plain files, from `nvswitches` in gpus.json."""
    for index in range(int(doc.get("nvswitches") or 0)):
        with open(f"/dev/nvidia-nvswitch{index}", "w"):
            pass
    return 0


def option_value(args: list[str], name: str) -> str | None:
    """Accept both `--name=value` and `--name value`, as the real tool does."""
    for position, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and position + 1 < len(args):
            return args[position + 1]
    return None


def main(args: list[str]) -> int:
    try:
        with open(GPUS_JSON) as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        doc = {"driver": None, "gpus": []}
    if args == ["--lab-make-devices"]:
        return make_devices(doc)
    if doc.get("driver") is None:
        sys.stdout.write(NO_DRIVER)
        return EXIT_NO_DRIVER
    if "--version" in args:
        return version(doc)
    # a GPU fallen off the bus (`"lost": true`): still on the PCI bus (fake_lspci), not listed by the driver
    gpus: list[dict[str, Any]] = [g for g in doc["gpus"] if not g.get("lost")]
    if not gpus:
        sys.stdout.write("No devices were found\n")
        return EXIT_NO_DEVICES
    selected = option_value(args, "-i") or option_value(args, "--id")
    if selected is not None:
        wanted = {s.strip() for s in selected.split(",")}
        gpus = [g for g in gpus if str(g["index"]) in wanted]
    query = option_value(args, "--query-gpu")
    if query is not None:
        return query_gpu(query, option_value(args, "--format") or "", gpus, doc)
    apps = option_value(args, "--query-compute-apps")
    if apps is not None:
        return query_apps(apps, gpus)
    if "-L" in args or "--list-gpus" in args:
        return list_gpus(gpus)
    if args[:1] == ["nvlink"]:
        return nvlink(args[1:], gpus)
    if "-q" in args or "--query" in args:
        return query_details(gpus, doc)
    if args[:1] == ["topo"] and "-m" in args:
        return topology(gpus)
    if args[:2] == ["topo", "-p2p"] and args[2:3] == ["r"]:
        return p2p(gpus, doc)
    if not [a for a in args if a not in ("-i", "--id") and a != selected]:
        return summary(gpus, doc)
    sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
    return EXIT_BAD_ARGS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
