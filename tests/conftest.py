"""Shared fixtures. Every test runs with its own TRAINDECK_HOME so nothing touches the real user's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No display on CI or these machines: Qt must render offscreen. Set before anything imports Qt.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def traindeck_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("traindeck-home")
    monkeypatch.setenv("TRAINDECK_HOME", str(home))
    return home


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
