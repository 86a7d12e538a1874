"""Ray joins the lab wheelhouse pinned to what is already there, once, without touching its main manifest."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from vllmctl.lab.wheelhouse import DEFAULT_PACKAGES, MANIFEST, RAY_MANIFEST, ensure_ray_wheels

EXISTING = "msgpack-1.0.0-py3-none-any.whl"


def test_ray_is_downloaded_once_with_the_existing_versions_as_constraints(tmp_path: Path) -> None:
    (tmp_path / EXISTING).write_bytes(b"x")
    main = {"packages": list(DEFAULT_PACKAGES), "files": [EXISTING]}
    (tmp_path / MANIFEST).write_text(json.dumps(main))
    calls: list[list[str]] = []

    def fake_pip(argv: list[str]) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        constraints = Path(argv[argv.index("--constraint") + 1]).read_text()
        assert constraints == "msgpack==1.0.0\n"
        (tmp_path / "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl").write_bytes(b"r")
        return subprocess.CompletedProcess(argv, 0, "", "")

    assert ensure_ray_wheels(tmp_path, run=fake_pip) == tmp_path
    assert len(calls) == 1 and calls[0][-1] == "ray==2.60.0"
    assert ["--find-links", str(tmp_path)] == calls[0][calls[0].index("--find-links") :][:2]
    assert json.loads((tmp_path / RAY_MANIFEST).read_text()) == {
        "packages": ["ray==2.60.0"],
        "files": ["ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"],
    }
    assert json.loads((tmp_path / MANIFEST).read_text()) == main
    assert not list(tmp_path.glob(".ray-constraints*"))
    ensure_ray_wheels(tmp_path, run=fake_pip)
    assert len(calls) == 1  # the manifest makes the second call free
