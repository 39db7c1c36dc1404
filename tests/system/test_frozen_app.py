"""A PyInstaller-frozen traindeck: its executable is no Python, and the bootloader changed the environment.

Simulated here (sys.frozen, sys._MEIPASS, the app as sys.executable, the bootloader's variables); the real bundle
is checked by `make frozen` and the steps in docs/desktop-app.md. Every Python the app starts (training, the
native config checks, the parameter counter) must be the user's interpreter with the user's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.frozen import pretend_frozen

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.environ import training_env, unfrozen_environ


@pytest.fixture
def frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A one-folder app: dist/traindeck/traindeck with its bundle in _internal, python3 on PATH."""
    app_dir = tmp_path / "dist" / "traindeck"
    return pretend_frozen(monkeypatch, app_dir / "traindeck", app_dir / "_internal", tmp_path / "bin")


def test_library_paths_come_back_from_their_orig_copies(frozen: dict[str, Path]) -> None:
    bundle = str(frozen["bundle"])
    env = unfrozen_environ({
        "LD_LIBRARY_PATH": f"{bundle}:/usr/local/cuda/lib64", "LD_LIBRARY_PATH_ORIG": "/usr/local/cuda/lib64",
        "LIBPATH": f"{bundle}:/opt/lib", "LIBPATH_ORIG": "/opt/lib",  # AIX's spelling of the same thing
        "HOME": "/home/me",
    })
    assert env == {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "LIBPATH": "/opt/lib", "HOME": "/home/me"}


def test_library_path_the_user_did_not_have_is_removed(frozen: dict[str, Path]) -> None:
    bundle = str(frozen["bundle"])
    env = unfrozen_environ({"LD_LIBRARY_PATH": bundle, "LIBPATH": bundle, "CUDA_HOME": "/usr/local/cuda"})
    assert env == {"CUDA_HOME": "/usr/local/cuda"}


def test_an_empty_original_stays_empty(frozen: dict[str, Path]) -> None:
    # LD_LIBRARY_PATH="" set by the user is saved as an empty _ORIG: restored as empty, not dropped, not the bundle.
    env = unfrozen_environ({"LD_LIBRARY_PATH": str(frozen["bundle"]), "LD_LIBRARY_PATH_ORIG": ""})
    assert env == {"LD_LIBRARY_PATH": ""}


def test_training_environment_from_the_real_process_environment(frozen: dict[str, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = str(frozen["bundle"])
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{bundle}:/opt/nccl/lib")
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/opt/nccl/lib")
    monkeypatch.setenv("_PYI_APPLICATION_HOME_DIR", bundle)
    monkeypatch.setenv("_PYI_ARCHIVE_FILE", str(frozen["app"]))
    monkeypatch.setenv("_PYI_PARENT_PROCESS_LEVEL", "0")
    monkeypatch.setenv("QT_PLUGIN_PATH", f"{bundle}/PySide6/Qt/plugins")
    env = training_env({"HF_TOKEN": "secret"})
    assert env["LD_LIBRARY_PATH"] == "/opt/nccl/lib"
    assert not [k for k in env if k.startswith("_PYI_") or k.endswith("_ORIG")]
    assert "QT_PLUGIN_PATH" not in env
    # The one bundle path a run gets on purpose: the line-buffering hook and traindeck_report, first on PYTHONPATH.
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith(os.path.join("launch", "site_hook"))
    assert env["HF_TOKEN"] == "secret"


def test_no_interpreter_chosen_takes_python3_and_says_how_to_choose(frozen: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path), tmp_path / "run")
    assert plan.errors == []
    assert plan.argv[0] == str(frozen["python3"]) != sys.executable
    assert any("no training interpreter chosen" in w and "--python PATH" in w for w in plan.warnings)


def test_no_interpreter_chosen_and_no_python3_is_an_error_that_says_to_pick_one(
        frozen: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.py").write_text("")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path), tmp_path / "run")
    assert any("has no Python of its own" in e and "choose the Python" in e for e in plan.errors)
    assert not any("no training interpreter chosen" in w for w in plan.warnings)


def test_a_chosen_interpreter_gets_no_note(frozen: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path, python=str(frozen["python3"])),
                      tmp_path / "run")
    assert not [m for m in plan.errors + plan.warnings if "interpreter chosen" in m]


def test_native_config_checks_use_python3_not_the_app(frozen: dict[str, Path]) -> None:
    from traindeck.backend.config import native

    seen: list[str] = []
    native.register_native_check("x-frozen-test", lambda data, python, timeout, options: seen.append(python) or [])
    try:
        native.native_verdicts("x-frozen-test", {})
    finally:
        native._CHECKS.pop("x-frozen-test", None)
    assert seen == [str(frozen["python3"])]


def test_parameter_counter_runs_as_a_file_with_python3(frozen: dict[str, Path], monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    from traindeck.backend.estimate import model_shape

    command = model_shape._worker_command()
    assert command[0] == str(frozen["python3"])
    assert Path(command[1]).name == "count_worker.py" and Path(command[1]).is_file()
    monkeypatch.setenv("LD_LIBRARY_PATH", str(frozen["bundle"]))
    assert "LD_LIBRARY_PATH" not in model_shape._worker_env()
    # The file runs on its own (no traindeck import): without targets it answers its usage line.
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=model_shape._worker_env(),
                          cwd=os.path.dirname(command[1]))
    assert done.returncode == 2
    assert "usage" in json.loads(done.stdout.strip().splitlines()[-1])["error"]


def test_not_frozen_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from traindeck.backend.estimate import model_shape

    monkeypatch.delattr(sys, "frozen", raising=False)
    assert model_shape._worker_command()[:3] == [sys.executable, "-m", "traindeck.backend.estimate.count_worker"]
    assert unfrozen_environ({"LD_LIBRARY_PATH": "/x", "LIBPATH_ORIG": "/y"}) == {
        "LD_LIBRARY_PATH": "/x", "LIBPATH_ORIG": "/y"}
