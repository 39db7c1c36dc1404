"""The distribution ships every package: a wheel built from pyproject must not miss a folder of code or data,
and building it must not warn (setuptools once said "Package 'traindeck.resources.demo' is absent from the
packages configuration" four times at every install)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import tomllib
from support import REPO

# Folders of data the program reads at run time: listed as packages (no __init__.py) with their package-data.
DATA_PACKAGES = {"traindeck.resources.demo", "traindeck.resources.presets", "traindeck.resources.pyhelpers",
                 "traindeck.backend.launch.site_hook", "traindeck.backend.config.snapshot"}


def test_every_code_folder_is_listed_as_a_package():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {"traindeck"}
    for top in ("backend", "gui"):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            on_disk.add("traindeck." + ".".join(rel.parts))
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == DATA_PACKAGES, "listed packages without a folder"
    for name in DATA_PACKAGES:
        assert (REPO / Path(*name.split(".")[1:])).is_dir(), name
        assert config["tool"]["setuptools"]["package-data"][name], name


def test_wheel_and_sdist_build_without_warnings_and_carry_the_resources(tmp_path: Path) -> None:
    # A copy of what git tracks (plus this checkout's changes): the build writes *.egg-info and build/ beside it.
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    source = tmp_path / "src"
    for name in files:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    out = tmp_path / "dist"
    built = {}
    for kind in ("wheel", "sdist"):
        build = f"import sys; from setuptools import build_meta as b; print('BUILT', b.build_{kind}(sys.argv[1]))"
        result = subprocess.run([sys.executable, "-W", "always", "-c", build, str(out)], cwd=source,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        # (distutils' "byte-compiling is disabled" notes come from PYTHONDONTWRITEBYTECODE in the test env.)
        log = "\n".join(line for line in (result.stdout + result.stderr).splitlines()
                        if "byte-compiling is disabled" not in line)
        assert "absent from the packages configuration" not in log, log[-3000:]
        assert "Warning" not in log and "warning:" not in log.lower(), log[-3000:]
        built[kind] = out / result.stdout.split("BUILT ")[-1].strip()
    wheel = built["wheel"]
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("traindeck/resources/demo/train_tiny.py", "traindeck/resources/presets/cpu-demo.yaml",
                   "traindeck/resources/pyhelpers/traindeck_report.py",
                   "traindeck/backend/launch/site_hook/sitecustomize.py", "traindeck/backend/system_check.py",
                   "traindeck/backend/config/snapshot/deepspeed.json",
                   "traindeck/backend/config/snapshot/accelerate.json"):
        assert needed in names, needed
    assert len([n for n in names if n.startswith("traindeck/resources/presets/")]) == 12
    assert not [n for n in names if "screenshots" in n]  # the README's pictures are not needed at run time
    with tarfile.open(built["sdist"]) as archive:
        members = {m.split("/", 1)[1] for m in archive.getnames() if "/" in m}
    assert {"resources/demo/train_tiny.py", "resources/presets/cpu-demo.yaml",
            "backend/launch/site_hook/sitecustomize.py", "README.md", "pyproject.toml"} <= members


def test_console_script_and_module_entry_point_agree():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["scripts"]["traindeck"] == "traindeck.__main__:main"
