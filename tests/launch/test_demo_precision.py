"""The demo script under the preset Estimate recommends: bf16 weights, DeepSpeed's CPU accelerator.

The Estimate page's demo (a 1.5B model on one 24 GiB GPU) advises zero2-offload with one process; "Use this"
turns that into a preset whose DeepSpeed section enables bf16. The demo script must train under it as it is
(accelerate launcher, DeepSpeed plugin), and under the deepspeed launcher with a bf16 config, on DeepSpeed's CPU
accelerator (DS_ACCELERATOR=cpu supports bf16). Both runs use the ops `make setup` built (TORCH_EXTENSIONS_DIR, see
support.runhelp.job_env).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from support import runhelp
from support.runhelp import DEMO, job_env, wait_finished

from traindeck.backend.estimate import EstimateForm, estimate_form, preset_from_advice
from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.presets import Preset, load_builtin
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run

pytestmark = [pytest.mark.slow, pytest.mark.train, pytest.mark.timeout(900)]
pytest.importorskip("deepspeed", reason="needs the train extra")

DEMO_ARGS = ("--steps", "6", "--batch-size", "4", "--step-time", "0", "--log-every", "2", "--no-tqdm")


def _advised_preset() -> Preset:
    estimate = estimate_form(EstimateForm(params="1.5B", gpus_per_node=1, gpu_mem="24", host_mem="64"))
    assert estimate.advice is not None
    return preset_from_advice(estimate.advice).preset


def _run(preset: Preset, *args: str) -> tuple[str, str]:
    run_dir = new_run_dir()
    request = LaunchRequest(script=str(DEMO), script_args=[*args, *DEMO_ARGS], preset=preset, cwd=run_dir.path,
                            env={"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": job_env()["TORCH_EXTENSIONS_DIR"]})
    plan = build_plan(request, run_dir.path)
    assert plan.ok, plan.errors
    assert runhelp.REAL_RUNS_ALLOWED
    record = start_run(plan, run_dir, name="bf16-demo")
    done = wait_finished(record.id, 600)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    return done.state, log


@pytest.mark.parametrize(("args", "mode"), [((), "accelerate"), (("--deepspeed_config", "{ds_config}"), "deepspeed")],
                         ids=["accelerate-prepare", "launch-page-demo-arguments"])
def test_estimate_advice_bf16_preset_trains_the_demo_under_accelerate(args: tuple[str, ...], mode: str) -> None:
    """Launch's demo arguments start with `--deepspeed_config {ds_config}` for a preset with a DeepSpeed section:
    the script then initialises DeepSpeed itself, under accelerate's launcher."""
    preset = _advised_preset()
    assert preset.deepspeed is not None and preset.deepspeed["bf16"]["enabled"] is True
    assert preset.launcher == "accelerate"
    state, log = _run(preset, *args)
    assert state == "succeeded", log[-3000:]
    assert f"train_tiny: mode={mode} world_size=1" in log
    assert "dtype=bfloat16" in log, log[-3000:]
    assert "'step': 6}" in log


def test_bf16_deepspeed_config_trains_the_demo_under_the_deepspeed_launcher() -> None:
    preset = copy.deepcopy(load_builtin("cpu-demo"))
    assert preset.deepspeed is not None
    preset.deepspeed["bf16"] = {"enabled": True}
    preset.num_processes = 1
    state, log = _run(preset, "--deepspeed_config", "{ds_config}")
    assert state == "succeeded", log[-3000:]
    assert "train_tiny: mode=deepspeed world_size=1" in log
    assert "dtype=bfloat16" in log, log[-3000:]
    assert "'step': 6}" in log
