"""The --gpus spec and the gpus.json document the fake nvidia-smi answers from."""

from __future__ import annotations

import pytest

from vllmctl.errors import InputError
from vllmctl.lab.gpus import DRIVER_RELEASES, GPU_MODELS, gpus_document, gpus_for_hosts, parse_gpu_spec


def test_count_and_model_parse_case_insensitively() -> None:
    (one,) = parse_gpu_spec("8xh100-80gb")
    assert one.model is GPU_MODELS["H100-80GB"]
    assert one.count == 8


def test_model_without_count_means_one_gpu() -> None:
    (one,) = parse_gpu_spec("L40S")
    assert (one.model, one.count) == (GPU_MODELS["L40S"], 1)


def test_none_means_no_gpus() -> None:
    (one,) = parse_gpu_spec("none")
    assert one.model is None
    assert one.count == 0


def test_a_list_cycles_over_the_hosts() -> None:
    hosts = gpus_for_hosts("8xH100-80GB,2xL40S,none", 5)
    assert [(h.model.key if h.model else None, h.count) for h in hosts] == [
        ("H100-80GB", 8),
        ("L40S", 2),
        (None, 0),
        ("H100-80GB", 8),
        ("L40S", 2),
    ]


@pytest.mark.parametrize(
    ("spec", "in_message"),
    [
        ("", "empty"),
        ("8xH100-80GB,", "empty"),
        ("8xTPUv5", "unknown GPU model"),
        ("0xL4", "out of range"),
        ("17xL4", "out of range"),
        ("eight x L4", "not COUNTxMODEL"),
    ],
)
def test_bad_specs_are_input_errors_with_hints(spec: str, in_message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_gpu_spec(spec)
    assert in_message in caught.value.message
    assert caught.value.hint


def test_document_lists_each_gpu_with_unique_bus_ids_and_uuids() -> None:
    (gpus,) = parse_gpu_spec("16xH100-80GB")
    doc = gpus_document("lab-1", gpus, DRIVER_RELEASES["580"])
    assert doc["driver"] == {"branch": "580", "version": "580.95.05", "cuda_version": "13.0"}
    assert [g["index"] for g in doc["gpus"]] == list(range(16))
    assert {g["name"] for g in doc["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    assert {g["memory_total_mib"] for g in doc["gpus"]} == {81559}
    assert len({g["pci_bus_id"] for g in doc["gpus"]}) == 16
    assert all(len(g["pci_bus_id"]) == len("00000000:18:00.0") for g in doc["gpus"])
    assert len({g["uuid"] for g in doc["gpus"]}) == 16


def test_uuids_differ_between_hosts_but_are_stable() -> None:
    (gpus,) = parse_gpu_spec("1xL4")
    first = gpus_document("lab-1", gpus, None)["gpus"][0]["uuid"]
    assert first == gpus_document("lab-1", gpus, None)["gpus"][0]["uuid"]
    assert first != gpus_document("lab-2", gpus, None)["gpus"][0]["uuid"]


def test_a_host_without_gpus_has_no_driver() -> None:
    doc = gpus_document("lab-1", parse_gpu_spec("none")[0], DRIVER_RELEASES["580"])
    assert doc == {
        "product": None,
        "driver": None,
        "nvswitches": 0,
        "sw_mng_bridges": 0,
        "fabric": None,
        "gpus": [],
    }


def test_eight_sxm_gpus_are_an_hgx_board_with_nvswitches() -> None:
    hgx = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], DRIVER_RELEASES["580"])
    assert hgx["nvswitches"] == 4
    assert hgx["fabric"] == {"state": "Not Started", "status": "N/A"}  # until a Fabric Manager runs
    # an HGX B200 (NVLink5) has no NVSwitch nodes: ConnectX bridges whose VPD says SW_MNG manage its switches
    b200 = gpus_document("lab-1", parse_gpu_spec("8xB200")[0], DRIVER_RELEASES["580"])
    assert (b200["nvswitches"], b200["sw_mng_bridges"]) == (0, 4)
    assert b200["fabric"] == {"state": "In Progress", "status": "N/A"}
    for spec in ("2xH100-80GB", "8xL40S"):  # fewer than a baseboard, or PCIe cards: no NVSwitch
        doc = gpus_document("lab-1", parse_gpu_spec(spec)[0], DRIVER_RELEASES["580"])
        assert (doc["nvswitches"], doc["sw_mng_bridges"]) == (0, 0)
