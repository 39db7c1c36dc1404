"""The training-environment probe: asks the interpreter in a subprocess, says clearly what is missing, caches."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traindeck.backend.launch.probe import (
    TrainingEnvironment,
    cached_environment,
    probe_environment,
    problems_for,
)

PYENV_311 = Path("/root/.pyenv/versions/3.11.7/bin/python3")


@pytest.fixture(scope="module")
def this_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainingEnvironment, bool]:
    """The test interpreter, probed once (importing torch takes tens of seconds on a slow machine)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("the train extra (torch, accelerate, deepspeed) is not installed here")
    had_torch = "torch" in sys.modules
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAINDECK_HOME", str(tmp_path_factory.mktemp("probe-home")))
        found = probe_environment(sys.executable, timeout=600, use_cache=False)
    return found, (not had_torch and "torch" in sys.modules)


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with nothing installed: no torch, no accelerate, no deepspeed."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    return root / "bin" / "python"


def test_probe_finds_torch_accelerate_deepspeed(this_env):
    found, imported_torch_here = this_env
    assert not imported_torch_here, "the probe must never import torch into our process"
    assert found.error is None and found.torch_error is None
    assert found.python == sys.executable
    assert found.python_version == platform.python_version()
    assert found.torch and found.torch.startswith("2.")
    assert found.accelerate and found.deepspeed and found.transformers
    if "+cpu" in found.torch:
        assert (found.cuda_available, found.device_count, found.torch_cuda) == (False, 0, None)
        assert "CPU only" in found.summary()
    assert problems_for(found, "deepspeed") == []
    assert problems_for(found, "accelerate", needs_deepspeed=True) == []


def test_probe_of_a_python_without_torch(bare_venv):
    found = probe_environment(str(bare_venv))
    assert found.error is None
    assert found.torch is None and "No module named 'torch'" in (found.torch_error or "")
    assert (found.accelerate, found.deepspeed, found.transformers) == (None, None, None)
    assert problems_for(found, "python") == [f"torch is not installed for {bare_venv} (pip install torch)"]
    assert problems_for(found, "deepspeed") == [
        f"torch is not installed for {bare_venv} (pip install torch)",
        f"deepspeed is not installed for {bare_venv} (pip install deepspeed)",
    ]
    assert f"accelerate is not installed for {bare_venv} (pip install accelerate)" in problems_for(found, "accelerate")
    assert "no torch" in found.summary()


@pytest.mark.skipif(not PYENV_311.exists(), reason="no pyenv Python 3.11.7 on this machine")
def test_probe_of_the_system_pyenv_python():
    found = probe_environment(str(PYENV_311))
    assert found.python_version == "3.11.7"
    assert found.torch is None
    assert f"torch is not installed for {PYENV_311} (pip install torch)" in problems_for(found, "accelerate")


def test_nonexistent_interpreter_is_a_clear_error_not_a_traceback(tmp_path):
    missing = str(tmp_path / "nowhere" / "python3")
    found = probe_environment(missing)
    assert found.error == f"Python interpreter not found: {missing} (choose one with --python PATH)"
    assert problems_for(found, "python") == [found.error]
    assert found.summary() == found.error
    assert cached_environment(missing) is None


def test_interpreter_that_is_not_python(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    found = probe_environment(str(fake))
    assert found.error == f"{fake} is not a working Python interpreter (exit code 3): boom: cannot start"


def test_interpreter_that_hangs(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")  # a child holding our pipes open too
    fake.chmod(0o755)
    started = time.monotonic()
    found = probe_environment(str(fake), timeout=1)
    assert time.monotonic() - started < 10
    assert found.error and "did not answer within 1 s" in found.error


def test_cache_answers_at_once_until_something_is_installed(bare_venv):
    first = probe_environment(str(bare_venv))
    assert not first.from_cache
    started = time.monotonic()
    again = cached_environment(str(bare_venv))
    assert again is not None and again.from_cache and time.monotonic() - started < 0.5
    assert probe_environment(str(bare_venv)).from_cache
    assert again.python_version == first.python_version and again.torch is None

    # `pip install deepspeed` in that environment: a new dist-info folder in site-packages.
    [site] = [d for d in first.site_dirs if d.endswith("site-packages") and str(bare_venv.parent.parent) in d]
    dist = Path(site) / "deepspeed-9.9.9.dist-info"
    time.sleep(0.01)
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\nVersion: 9.9.9\n")
    assert cached_environment(str(bare_venv)) is None
    fresh = probe_environment(str(bare_venv))
    assert not fresh.from_cache and fresh.deepspeed == "9.9.9"


def test_cache_is_per_visible_devices(bare_venv):
    probe_environment(str(bare_venv))
    assert cached_environment(str(bare_venv), env={**os.environ, "CUDA_VISIBLE_DEVICES": "3"}) is None


def test_bare_interpreter_name_is_looked_up_on_path(bare_venv, monkeypatch):
    monkeypatch.setenv("PATH", str(bare_venv.parent))
    found = probe_environment("python")
    assert found.error is None and found.python == str(bare_venv)
