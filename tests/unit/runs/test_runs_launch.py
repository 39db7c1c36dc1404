"""launch_run: a LaunchRequest becomes a started run, or nothing at all (no run directory, no record)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.runhelp import wait_finished

from traindeck.backend.core.paths import runs_dir
from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.probe import TrainingEnvironment
from traindeck.backend.presets import load_preset
from traindeck.backend.runs.control.new_run import launch_run
from traindeck.backend.runs.record.run_store import RunStore

# What a probe of this interpreter says, written out so these tests need no torch import.
HAS_TORCH = TrainingEnvironment(python=sys.executable, python_version="3", torch="2", torch_cuda=None,
                                cuda_available=False, device_count=0, accelerate="1", deepspeed="0.1")


def _runs() -> list[str]:
    with RunStore() as store:
        return [r.id for r in store.list_runs()]


def test_a_plan_with_errors_starts_nothing_and_leaves_no_run_directory(tmp_path):
    request = LaunchRequest(script="missing.py", cwd=tmp_path, python=sys.executable)
    outcome = launch_run(request, environment=HAS_TORCH)
    assert not outcome.started and any("script not found" in e for e in outcome.plan.errors)
    assert not any(runs_dir().iterdir()) and _runs() == []


def test_a_missing_interpreter_is_a_plan_error(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    outcome = launch_run(LaunchRequest(script="train.py", cwd=tmp_path, python=str(tmp_path / "nope" / "python")))
    assert not outcome.started and any("interpreter not found" in e for e in outcome.plan.errors)
    assert _runs() == []


@pytest.mark.launch
def test_a_good_request_starts_a_supervised_run_that_succeeds(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os, sys\nprint('hello', os.environ['GREETING'], sys.argv[1:])\n")
    request = LaunchRequest(script=str(script), script_args=["--steps", "2"], cwd=tmp_path, launcher="python",
                            python=sys.executable, env={"GREETING": "hi", "HF_TOKEN": "hf_secret_value"})
    outcome = launch_run(request, name="", preset_name="mine", environment=HAS_TORCH)
    assert outcome.started and outcome.record is not None
    done = wait_finished(outcome.record.id, 120)
    assert done.state == "succeeded", done.diagnosis
    assert (done.name, done.preset) == ("train", "mine")  # named after the script, as `traindeck run` does
    log = Path(done.run_dir, "output.log").read_text()
    assert "hello hi ['--steps', '2']" in log
    assert "hf_secret_value" not in Path(done.run_dir, "command.json").read_text()


def test_a_preset_without_accelerate_config_runs_its_own_process_count(tmp_path):
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path, preset=load_preset("cpu-demo")),
                      tmp_path / "run", free_port=lambda: 29999)
    assert plan.launcher == "deepspeed" and plan.nproc == 2
    assert plan.argv[3:5] == ["--num_gpus", "2"]


def test_the_preview_is_the_launch_plan_with_placeholders_and_creates_nothing(tmp_path):
    from traindeck.backend.runs.control.new_run import preview_plan

    (tmp_path / "train.py").write_text("")
    request = LaunchRequest(script="train.py", script_args=["--deepspeed_config", "{ds_config}"], cwd=tmp_path,
                            preset=load_preset("cpu-demo"), python=sys.executable)
    plan = preview_plan(request, environment=HAS_TORCH)
    assert plan.ok, plan.errors
    assert plan.argv[:6] == [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port"]
    assert plan.argv[6] == "FREE_PORT"
    assert plan.argv[-1] == str(runs_dir() / "RUN_ID" / "ds_config.json")
    assert not runs_dir().exists() or not any(runs_dir().iterdir())
    no_deepspeed = preview_plan(request, environment=TrainingEnvironment(
        python=sys.executable, python_version="3", torch="2"))
    assert any("deepspeed is not installed" in e for e in no_deepspeed.errors)
