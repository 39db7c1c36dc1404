"""The distribution ships every package: a wheel built from pyproject must not miss a folder of code."""

from __future__ import annotations

import tomllib
from conftest import REPO


def test_every_code_folder_is_listed_as_a_package():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {"traindeck"}
    for top in ("backend", "gui"):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            on_disk.add("traindeck." + ".".join(rel.parts))
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == set(), "listed packages without a folder"


def test_console_script_and_module_entry_point_agree():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["scripts"]["traindeck"] == "traindeck.__main__:main"
