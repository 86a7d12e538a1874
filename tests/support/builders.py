"""Small builders for release tests: manifests and host listings as plain data."""

from __future__ import annotations

from typing import Any

from vllmctl.releases.host import HostReleases, Manifest, Release

VENV = "/opt/vllmctl/venvs/vllm-0.11.0"


def manifest(release: str, venv: str = VENV, units: dict[str, str] | None = None) -> Manifest:
    return Manifest(
        id=release,
        host="gpu1",
        created_at="2026-11-21T09:00:00+00:00",
        created_by="ops@ctl",
        inventory_digest="d" * 64,
        engine="vllm",
        engine_version="0.11.0",
        venv_path=venv,
        units=units if units is not None else {"vllmctl-m-0.service": f"[Service]\n# {release}\n"},
    )


def release(spec: dict[str, Any]) -> Release:
    """spec: {"id", "status": incomplete|pending|good|failed, optional "venv"}."""
    status = spec["status"]
    verdict = None if status in ("incomplete", "pending") else {"passed": status == "good"}
    return Release(spec["id"], status != "incomplete", manifest(spec["id"], spec.get("venv", VENV)), verdict)


def host_state(doc: dict[str, Any]) -> HostReleases:
    return HostReleases(
        tuple(release(r) for r in doc["releases"]),
        doc.get("current"),
        doc.get("known_good"),
        frozenset(doc.get("venvs", [VENV])),
    )
