"""The estimate as a form (what the Estimate page sends) and the advice turned into a preset."""

from __future__ import annotations

import os

import pytest

from traindeck.backend.estimate import GIB, Machine, Workload, estimate_rows, shape_from_params
from traindeck.backend.estimate.advised_preset import preset_from_advice
from traindeck.backend.estimate.inputs import EstimateForm, InputProblem, check_form, estimate_form
from traindeck.backend.presets import load_builtin


def test_form_gives_the_same_rows_as_the_estimator():
    form = EstimateForm(params="1.5B", gpu_mem="24", host_mem="64", micro_batch=2, seq_len=1024,
                        activation_checkpointing=True, optimizer="lion", precision="fp16")
    result = estimate_form(form)
    expected = estimate_rows(shape_from_params(1_500_000_000), Machine(1, 1, 24 * GIB, 64 * GIB),
                             Workload(precision="fp16", optimizer="lion", micro_batch=2, seq_len=1024,
                                      activation_checkpointing=True))
    assert result.rows == expected
    assert result.advice is not None and result.advice_problem is None


def test_each_bad_field_is_named():
    _, problems = check_form(EstimateForm(params="1.5Q", hidden_size="wide", gpu_mem="lots", layers="0"))
    assert [p.field for p in problems] == ["params", "hidden_size", "layers", "gpu_mem"]
    assert problems[0].message.startswith("Parameters: cannot read '1.5Q'")
    assert problems[1].message.startswith("Hidden size:") and problems[3].message.startswith("GPU memory:")
    with pytest.raises(InputProblem) as raised:
        estimate_form(EstimateForm(params="1.5Q"))
    assert raised.value.field == "params"


def test_missing_model_and_a_layer_larger_than_the_model():
    _, problems = check_form(EstimateForm())
    assert problems[0].field == "params" and "parameter count" in problems[0].message
    _, problems = check_form(EstimateForm(params="1M", largest_layer="2M"))
    assert [p.field for p in problems] == ["largest_layer"]


def test_overrides_replace_derived_shape():
    result = estimate_form(EstimateForm(params="7B", hidden_size="4096", layers="32", largest_layer="131M",
                                        gpu_mem="80"))
    assert (result.shape.hidden_size, result.shape.num_layers, result.shape.largest_layer_params) == (4096, 32, 131_000_000)
    assert not any("hidden size" in n for n in result.notes)


def test_unknown_gpu_memory_gives_rows_but_no_advice():
    result = estimate_form(EstimateForm(params="1B"))
    assert all(r.verdict == "unknown" for r in result.rows)
    assert result.advice is None and "GPU memory" in (result.advice_problem or "")


def test_a_missing_model_config_names_the_field(tmp_path):
    with pytest.raises(InputProblem) as raised:
        estimate_form(EstimateForm(model_config=str(tmp_path / "nope" / "config.json"), gpu_mem="24"))
    assert raised.value.field == "model_config" and raised.value.message.startswith("Model config: ")


def test_advice_becomes_the_built_in_preset_with_the_estimated_settings():
    advice = estimate_form(EstimateForm(params="1.5B", gpu_mem="24", host_mem="64", micro_batch=2)).advice
    assert advice is not None and advice.preset == "zero2-offload"
    made = preset_from_advice(advice)
    builtin = load_builtin("zero2-offload")
    assert made.base_name == "zero2-offload" and made.preset.name == "zero2-offload-advised"
    assert not made.preset.builtin and made.preset.path is None
    assert made.preset.accelerate["num_processes"] == 1 != builtin.accelerate["num_processes"]
    assert made.preset.deepspeed["train_micro_batch_size_per_gpu"] == 2
    assert made.preset.deepspeed["zero_optimization"] == builtin.deepspeed["zero_optimization"]
    assert builtin.accelerate["num_processes"] == load_builtin("zero2-offload").accelerate["num_processes"]


def test_advice_matching_the_built_in_keeps_it_and_script_work_becomes_a_note():
    advice = estimate_form(EstimateForm(params="1.5B", gpu_mem="24", host_mem="64", gpus_per_node=2,
                                        activation_checkpointing=True, micro_batch=8)).advice
    assert advice is not None and advice.preset == "zero2-offload"  # 2 GPUs and micro batch 8, as it ships
    made = preset_from_advice(advice)
    assert made.changed == {} and made.preset.name == "zero2-offload" and made.preset.builtin
    assert made.preset == load_builtin("zero2-offload")
    assert any("activation checkpointing" in n for n in made.script_notes)


@pytest.mark.parametrize("strategy", ["zero3+opt-nvme", "zero3+opt-nvme+param-cpu", "zero3+opt-nvme+param-nvme"])
def test_an_nvme_advice_becomes_a_coherent_preset_that_launches(strategy):
    from traindeck.backend.core import paths
    from traindeck.backend.estimate.advisor import PRESET_FOR, Advice
    from traindeck.backend.presets import validate_preset

    name, settings = PRESET_FOR[strategy]
    made = preset_from_advice(Advice(row=None, reason="", preset=name, settings=dict(settings)))
    zero = made.preset.deepspeed["zero_optimization"]
    for which in ("offload_optimizer", "offload_param"):
        section = zero[which]
        if section["device"] == "nvme":  # a real folder, writable, in place of /path/to/nvme
            assert section["nvme_path"] == str(paths.data_dir() / "nvme-offload")
            assert os.access(section["nvme_path"], os.W_OK)
        else:  # no NVMe key left beside a device that is not nvme
            assert not {"nvme_path", "buffer_count", "buffer_size", "max_in_cpu"} & set(section), section
    assert [m for m in validate_preset(made.preset) if m.severity == "error"] == []
    assert made.changed and made.preset.name == "zero-infinity-nvme-advised"


def test_an_nvme_advice_takes_the_folder_the_estimate_was_given(tmp_path):
    from traindeck.backend.estimate.advisor import Advice

    given = {"deepspeed.zero_optimization.offload_optimizer.nvme_path": str(tmp_path)}
    made = preset_from_advice(Advice(row=None, reason="", preset="zero-infinity-nvme", settings=given))
    zero = made.preset.deepspeed["zero_optimization"]
    assert zero["offload_optimizer"]["nvme_path"] == zero["offload_param"]["nvme_path"] == str(tmp_path)


def test_heads_and_vocabulary_reach_the_shape_as_the_cli_options_do():
    from traindeck.backend.estimate import with_overrides

    result = estimate_form(EstimateForm(params="1.5B", heads="16", vocab_size="50,257", gpu_mem="24"))
    assert result.shape.num_heads == 16 and result.shape.vocab_size == 50_257
    # What `traindeck estimate --params 1.5B --heads 16 --vocab-size 50257` computes.
    assert result.shape == shape_from_params(1_500_000_000, num_heads=16, vocab_size=50_257)
    assert not any("attention heads" in n or "vocabulary" in n for n in result.notes)
    assert with_overrides(result.shape) == result.shape
    _, problems = check_form(EstimateForm(params="1.5B", heads="0", vocab_size="many"))
    assert [p.field for p in problems] == ["heads", "vocab_size"]
    assert problems[0].message.startswith("Attention heads:") and problems[1].message.startswith("Vocabulary:")


def test_the_estimate_names_the_model_for_the_launch_memory_check():
    assert estimate_form(EstimateForm(params=" 1.5B ", gpu_mem="24")).model_size == "1.5B"
