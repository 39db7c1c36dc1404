"""Shared fixtures. Every test runs with its own TRAINDECK_HOME so nothing touches the real user's files."""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

import pytest

# No display on CI or these machines: Qt must render offscreen. Set before anything imports Qt.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The remote-machine sshd (127.0.0.4:2224) is one session fixture for every module that uses it: a fixture imported
# into two test modules is two instances, and the second sshd could not bind the port while the first one, with
# another key, answered its tests ("authentication refused" in CI). The same for the two loopback "nodes"
# (127.0.0.2/127.0.0.3:2222): the multi-node tests and the Launch page's Check hosts test share one sshd.
from sshhelp import sshd  # noqa: E402, F401
from sshnodes import ssh_nodes  # noqa: E402, F401


@pytest.fixture(autouse=True)
def traindeck_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("traindeck-home")
    monkeypatch.setenv("TRAINDECK_HOME", str(home))
    return home


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


HEAVY_MODULES = ("torch", "deepspeed", "accelerate", "transformers")


class _RefuseHeavyImports(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname.split(".")[0] in HEAVY_MODULES:
            self.attempts.append(fullname)
            raise ImportError(f"{fullname} imported in the dashboard's process (test guard)")
        return None


@pytest.fixture
def heavy_imports(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The training libraries the code under test tried to import in this process (refused), even when an earlier
    test in the same pytest process already imported them: they are hidden from sys.modules for the test, so a
    plain `import torch` reaches the finder. Assert the list is empty."""
    guard = _RefuseHeavyImports()
    for name in [n for n in sys.modules if n.split(".")[0] in HEAVY_MODULES]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [guard, *sys.meta_path])
    return guard.attempts


def pretend_frozen(monkeypatch: pytest.MonkeyPatch, app: Path, bundle: Path, bindir: Path) -> dict[str, Path]:
    """Make this process look like a PyInstaller app: sys.frozen, `app` (a stub, no Python) as sys.executable,
    `bundle` as sys._MEIPASS, and a PATH holding only `bindir` with python3 (this interpreter) in it."""
    bundle.mkdir(parents=True, exist_ok=True)
    app.parent.mkdir(parents=True, exist_ok=True)
    app.write_text("#!/bin/sh\n")
    app.chmod(0o755)
    bindir.mkdir(parents=True, exist_ok=True)
    python3 = bindir / "python3"
    python3.symlink_to(sys.executable)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    monkeypatch.setattr(sys, "executable", str(app))
    monkeypatch.setenv("PATH", str(bindir))
    return {"bundle": bundle, "app": app, "python3": python3, "bin": bindir}
