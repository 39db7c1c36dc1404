"""The Configure page's command preview: the launch's own plan, with placeholders for what only a launch decides."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from traindeck.backend.launch.preview import FREE_PORT, PLACEHOLDER_SCRIPT, RUN_ID, preview_launch
from traindeck.backend.presets import load_preset, render_files


def test_preview_of_a_deepspeed_preset_without_a_script(traindeck_home: Path):
    preset = load_preset("cpu-demo")
    preview = preview_launch(preset)
    assert preview.argv[:3] == [sys.executable, "-m", "deepspeed.launcher.runner"]
    assert preview.argv[-1] == PLACEHOLDER_SCRIPT
    assert FREE_PORT in preview.argv and "--num_gpus" in preview.argv
    assert preview.argv[preview.argv.index("--num_gpus") + 1] == "2"  # the preset's num_processes
    assert not preview.errors  # the missing placeholder script is not reported
    assert json.loads(preview.files["ds_config.json"]) == preset.deepspeed


def test_preview_of_an_accelerate_preset_names_the_run_directory(traindeck_home: Path, tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    preset = load_preset("zero3-offload")
    preview = preview_launch(preset, script=str(script), script_args=["--lr", "1e-4"], nproc=4,
                             env={"HF_TOKEN": "hf_secret", "MY_FLAG": "1"}, cwd=str(tmp_path))
    config = preview.argv[preview.argv.index("--config_file") + 1]
    assert Path(config).parent.name == RUN_ID and Path(config).name == "accelerate_config.yaml"
    assert preview.argv[-3:] == [str(script), "--lr", "1e-4"]
    assert preview.argv[preview.argv.index("--num_processes") + 1] == "4"
    assert preview.env == {"HF_TOKEN": "***", "MY_FLAG": "1"}
    assert preview.cwd == str(tmp_path)
    assert preview.files == render_files(preset, Path(preview.run_dir))
    assert not preview.errors
    missing = preview_launch(preset, script=str(tmp_path / "nope.py"))
    assert any("script not found" in e for e in missing.errors)


def test_an_fsdp_preset_this_machine_cannot_run_is_kept_apart_from_the_errors(traindeck_home: Path, monkeypatch,
                                                                                tmp_path: Path):
    """The preset is right and the machine cannot run it: the preview holds that in `machine` (the Configure page
    says it as a warning, as `config check` does), not in `errors`, and leaves out the "runs on the CPU" note."""
    import dataclasses

    from traindeck.backend.launch import preview as preview_module
    from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE
    from traindeck.backend.launch.probe import TrainingEnvironment

    real = preview_module.cached_environment(sys.executable)
    cpu = dataclasses.replace(real, cuda_available=False) if real is not None else TrainingEnvironment(
        python=sys.executable, python_version="3.11.7", torch="2.13.0+cpu", cuda_available=False)
    monkeypatch.setattr(preview_module, "cached_environment", lambda python: cpu)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    preview = preview_launch(load_preset("fsdp-full-shard"), script=str(script))
    (said,) = preview.machine
    assert said.startswith("FSDP under accelerate needs CUDA") and ACCELERATE_NO_DEVICE in said
    assert said not in preview.errors
    assert not any("the run uses the CPU" in w for w in preview.warnings)
    plain = preview_launch(load_preset("ddp"), script=str(script))  # a config the CPU runs: the note stays
    assert plain.machine == [] and any("the run uses the CPU" in w for w in plain.warnings)
