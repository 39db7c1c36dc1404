"""The Launch page tests' shared interpreter probe, imported by each module that uses it (module scope: one probe
a module). Not a tests/gui/conftest.py: tests import names from tests/conftest.py as `conftest`, and a second
conftest module shadows it."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="module")
def probe_cache(tmp_path_factory):
    """One real probe of this interpreter (a torch import, ~3 s), shared: each test gets a copy of its cache."""
    home = tmp_path_factory.mktemp("probe-home")
    old = os.environ.get("TRAINDECK_HOME")
    os.environ["TRAINDECK_HOME"] = str(home)
    try:
        from traindeck.backend.launch.probe import probe_environment

        assert probe_environment(sys.executable).error is None
    finally:
        if old is None:
            os.environ.pop("TRAINDECK_HOME", None)
        else:
            os.environ["TRAINDECK_HOME"] = old
    return home / "cache" / "probes"
