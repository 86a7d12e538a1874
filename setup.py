"""Ships the repository's top-level templates/ and playbooks/ inside the wheel as vllmctl/_shipped/, where
`vllmctl.render.templates` and `vllmctl.tasks.playbooks` look first when vllmctl is installed from a wheel."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("templates", "playbooks")


class BuildWithShippedData(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for name in SHIPPED:
            target = Path(self.build_lib) / "vllmctl" / "_shipped" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(root / name, target)


setup(cmdclass={"build_py": BuildWithShippedData})
