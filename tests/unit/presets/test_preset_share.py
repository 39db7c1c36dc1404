"""Sharing a preset: `presets export` writes the tools' files and NAME.traindeck.yaml (the whole preset, secrets left
out), and `presets import` of that file or folder gives the same preset back: launcher, num_processes, env and
configs. The tools' files stay what accelerate and DeepSpeed read as they are."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.presets import user_preset

from traindeck.backend.config.source import load_file
from traindeck.backend.presets import (
    PresetError,
    export_preset,
    import_preset,
    load_preset,
    save_preset,
)

TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"


def _traindeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


def _cpu_demo_mb2() -> None:
    """Save As z2-off-mb2 from cpu-demo with the micro-batch changed to 2, as the Configure page does."""
    preset = load_preset("cpu-demo")
    preset.name, preset.builtin = "z2-off-mb2", False
    preset.deepspeed["train_micro_batch_size_per_gpu"] = 2
    save_preset(preset)


def _same(a, b) -> None:
    assert (a.launcher, a.num_processes, a.env, a.accelerate, a.deepspeed) == \
        (b.launcher, b.num_processes, b.env, b.accelerate, b.deepspeed)


def test_cli_export_then_import_gives_the_same_preset(tmp_path: Path):
    _cpu_demo_mb2()
    out = tmp_path / "D"
    exported = _traindeck("presets", "export", "--dir", str(out), "z2-off-mb2")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [
        f"Exported to {out}: ds_config.json (DeepSpeed's config), z2-off-mb2.traindeck.yaml (the whole preset, for "
        "traindeck presets import)"]
    preset_file = out / "z2-off-mb2.traindeck.yaml"
    assert stat.S_IMODE(preset_file.stat().st_mode) == 0o600

    imported = _traindeck("presets", "import", str(preset_file), "--name", "reimp")
    assert imported.returncode == 0, imported.stderr
    assert "imported preset 'reimp' (deepspeed launcher, 2 process(es), env DS_ACCELERATOR" in imported.stdout
    original, again = load_preset("z2-off-mb2"), load_preset("reimp")
    _same(again, original)
    assert again.num_processes == 2 and again.env == {"DS_ACCELERATOR": "cpu"}
    assert again.deepspeed["train_micro_batch_size_per_gpu"] == 2 and again.description == original.description

    # The folder imports the same preset; the JSON alone still imports the DeepSpeed config, and says where the
    # whole preset is.
    assert _traindeck("presets", "import", str(out), "--name", "reimp-dir").returncode == 0
    _same(load_preset("reimp-dir"), original)
    json_only = _traindeck("presets", "import", str(out / "ds_config.json"), "--name", "reimp-json")
    assert json_only.returncode == 0 and f"note: {preset_file} beside it holds the whole" in json_only.stdout
    assert load_preset("reimp-json").deepspeed == original.deepspeed


def test_the_tools_file_is_still_the_deepspeed_json_alone(tmp_path: Path):
    _cpu_demo_mb2()
    written = export_preset("z2-off-mb2", tmp_path)
    assert [p.name for p in written] == ["ds_config.json", "z2-off-mb2.traindeck.yaml"]
    doc = load_file(written[0])
    assert doc.kind == "deepspeed" and not doc.syntax
    assert json.loads(written[0].read_text()) == load_preset("z2-off-mb2").deepspeed
    assert stat.S_IMODE(written[0].stat().st_mode) == 0o644


@pytest.mark.train
def test_deepspeed_reads_the_exported_json(tmp_path: Path):
    zero_config = pytest.importorskip("deepspeed.runtime.zero.config")
    _cpu_demo_mb2()
    ds = json.loads(export_preset("z2-off-mb2", tmp_path)[0].read_text())
    zero = zero_config.DeepSpeedZeroConfig(**ds["zero_optimization"])
    assert zero.stage == 2 and ds["train_micro_batch_size_per_gpu"] == 2


def test_an_accelerate_preset_round_trips_with_both_configs(tmp_path: Path):
    original = load_preset("zero3-offload")
    written = export_preset(original, tmp_path)
    assert [p.name for p in written] == ["accelerate_config.yaml", "ds_config.json", "zero3-offload.traindeck.yaml"]
    acc = yaml.safe_load(written[0].read_text())
    assert acc["deepspeed_config"]["deepspeed_config_file"] == str(written[1])  # as accelerate reads it
    _same(import_preset([written[2]], "z3-back"), original)


def test_a_secret_named_env_variable_is_not_written_in_clear(tmp_path: Path):
    from traindeck.backend.presets import export_summary

    preset = user_preset("shared", num_processes=2,
                         env={"DS_ACCELERATOR": "cpu", "HF_TOKEN": "plain-value-123", "WANDB_PROJECT": TOKEN})
    left_out: list[str] = []
    written = export_preset(preset, tmp_path, left_out=left_out)
    assert left_out == ["HF_TOKEN", "WANDB_PROJECT"]
    for path in written:
        text = path.read_text()
        assert "plain-value-123" not in text and TOKEN not in text
    assert "Left out as secrets (set them in the environment): HF_TOKEN, WANDB_PROJECT" in written[-1].read_text()
    assert export_summary(written, left_out).endswith("; left out as secrets: HF_TOKEN, WANDB_PROJECT")
    back = import_preset([tmp_path], "shared-back")
    assert back.env == {"DS_ACCELERATOR": "cpu"} and back.num_processes == 2


def test_a_secret_in_a_config_section_refuses_the_export(tmp_path: Path):
    preset = user_preset("leaky", deepspeed={"train_micro_batch_size_per_gpu": 1,
                                             "comet": {"enabled": True, "api_key": "abcdef123456"}})
    with pytest.raises(PresetError, match="refusing to export preset 'leaky': 'deepspeed.comet.api_key'"):
        export_preset(preset, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_preset_file_is_imported_alone_and_a_folder_with_two_is_refused(tmp_path: Path):
    written = export_preset("cpu-demo", tmp_path)
    with pytest.raises(PresetError, match="is a traindeck preset file: import it alone"):
        import_preset([written[0], written[1]], "both")
    export_preset("zero2", tmp_path)
    with pytest.raises(PresetError, match="holds 2 preset files"):
        import_preset([tmp_path], "two")
