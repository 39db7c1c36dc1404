"""packaging/: the menu entry, AppStream metainfo and icons are valid and install per user; the PyInstaller spec
ships every file the app reads at run time."""

from __future__ import annotations

import configparser
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support import REPO

REPO = REPO
PACKAGING = REPO / "packaging"
DESKTOP = PACKAGING / "traindeck.desktop"
METAINFO = PACKAGING / "io.github.traindeck.metainfo.xml"


def _entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return parser["Desktop Entry"]


def test_desktop_entry_starts_traindeck_with_its_icon() -> None:
    entry = _entry(DESKTOP)
    assert entry["Type"] == "Application"
    assert entry["Exec"] == "traindeck" and entry["Icon"] == "traindeck"
    assert entry["Categories"] == "Development;Science;"
    assert entry["Terminal"] == "false"
    assert entry["StartupWMClass"] == "traindeck"  # the app sets desktopFileName/class "traindeck"


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_entry_passes_desktop_file_validate() -> None:
    done = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stdout.lower()


def test_metainfo_names_the_desktop_entry_and_its_licenses() -> None:
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == "io.github.traindeck"
    assert root.findtext("launchable") == DESKTOP.name
    assert root.findtext("metadata_license") == "CC0-1.0" and root.findtext("project_license") == "MIT"
    assert root.findtext("summary") and root.find("description/p") is not None
    assert root.find("releases/release").get("version") == _project_version()  # type: ignore[union-attr]


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstreamcli not installed")
def test_metainfo_passes_appstreamcli_validate() -> None:
    done = subprocess.run(["appstreamcli", "validate", "--no-net", str(METAINFO)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_icons_are_square_pngs_of_their_size() -> None:
    for size in (48, 128, 256):
        data = (PACKAGING / "icons" / f"traindeck-{size}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (size, size)
    assert ET.parse(PACKAGING / "icons" / "traindeck.svg").getroot().tag.endswith("svg")


def test_install_script_installs_and_removes_per_user(tmp_path: Path) -> None:
    data = tmp_path / "share"
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(data), "PATH": "/usr/bin:/bin"}
    app = tmp_path / "dist" / "traindeck" / "traindeck"
    app.parent.mkdir(parents=True)
    app.write_text("#!/bin/sh\n")
    app.chmod(0o755)
    script = str(PACKAGING / "install_desktop.sh")
    subprocess.run(["sh", script, "--exec", str(app)], check=True, capture_output=True, env=env)
    installed = {p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file() and "cache" not in p.name}
    assert {"applications/traindeck.desktop", "metainfo/io.github.traindeck.metainfo.xml",
            "icons/hicolor/48x48/apps/traindeck.png", "icons/hicolor/128x128/apps/traindeck.png",
            "icons/hicolor/256x256/apps/traindeck.png", "icons/hicolor/scalable/apps/traindeck.svg"} <= installed
    entry = _entry(data / "applications" / "traindeck.desktop")
    assert entry["Exec"] == entry["TryExec"] == str(app)
    assert entry["Icon"] == "traindeck"

    refused = subprocess.run(["sh", script, "--exec", str(tmp_path / "missing")], capture_output=True, text=True,
                             env=env)
    assert refused.returncode != 0 and "not an executable" in refused.stderr

    subprocess.run(["sh", script, "--uninstall"], check=True, capture_output=True, env=env)
    assert not [p for p in data.rglob("traindeck*") if p.is_file()]


def test_spec_ships_the_files_read_at_run_time() -> None:
    spec = (PACKAGING / "traindeck.spec").read_text()
    # Read as files (not imported) by the app or by the training interpreter it starts.
    for needed in ('"resources"', '"site_hook"', '"native_probe.py"', '"count_worker.py"', 'glob("*/__init__.py")',
                   'glob("*/__init__.pyi")',
                   '"snapshot" / "*.json"'):
        assert needed in spec, needed
    for heavy in ("torch", "deepspeed", "accelerate", "transformers"):
        assert f'"{heavy}"' in spec.split("HEAVY = [", 1)[1].split("]", 1)[0]
    assert (REPO / "backend" / "config" / "native_probe.py").is_file()
    assert (REPO / "backend" / "estimate" / "count_worker.py").is_file()
    assert list((REPO / "backend" / "launch" / "site_hook").glob("*.py"))
    assert sorted(p.name for p in (REPO / "backend" / "config" / "snapshot").glob("*.json")) == [
        "accelerate.json", "deepspeed.json"]


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
