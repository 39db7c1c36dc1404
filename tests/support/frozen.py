"""Making the test process look like the PyInstaller app, for the tests of what the frozen app starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


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
