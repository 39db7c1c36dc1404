"""Before launch: a preset's strategy row for a model size, against what is free (given here, as NVML would)."""

from __future__ import annotations

import pytest

from traindeck.backend.estimate import GIB, QuantityError, shape_from_params
from traindeck.backend.estimate.model_shape import ModelConfigError
from traindeck.backend.estimate.prelaunch import (
    FreeMemory,
    check_preset,
    preset_workload,
    read_model_size,
    strategy_for_preset,
    workload_for_preset,
)
from traindeck.backend.presets import Preset, load_preset


@pytest.mark.parametrize(("name", "strategy"), [
    ("single-process", "dp"),
    ("ddp", "dp"),
    ("zero1", "zero1"),
    ("zero2", "zero2"),
    ("zero2-offload", "zero2+opt-cpu"),
    ("zero3", "zero3"),
    ("zero3-offload", "zero3+opt-cpu+param-cpu"),
    ("zero-infinity-nvme", "zero3+opt-nvme+param-nvme"),
    ("fsdp-full-shard", "fsdp-full-shard"),
    ("fsdp-shard-grad-op", "fsdp-shard-grad-op"),
    ("fsdp-offload", "fsdp-full-shard+offload"),
    ("cpu-demo", "zero2+opt-cpu"),
])
def test_every_builtin_preset_maps_to_its_strategy(name, strategy):
    assert strategy_for_preset(load_preset(name)).name == strategy


def test_combinations_without_a_table_row_still_get_deepspeed_arithmetic():
    preset = Preset(name="p", launcher="deepspeed",
                    deepspeed={"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
    strategy = strategy_for_preset(preset)
    assert (strategy.zero_stage, strategy.offload_optimizer, strategy.offload_param) == (3, "none", "cpu")
    # Stage 2 cannot offload to NVMe: DeepSpeed keeps those states in host RAM.
    stage2 = Preset(name="q", launcher="deepspeed",
                    deepspeed={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})
    assert strategy_for_preset(stage2).name == "zero2+opt-cpu"
    fsdp2 = Preset(name="f", launcher="accelerate", accelerate={
        "distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": False}})
    assert strategy_for_preset(fsdp2).name == "fsdp-shard-grad-op"


def test_workload_reads_precision_optimizer_and_micro_batch_from_the_preset():
    demo = workload_for_preset(load_preset("cpu-demo"))
    assert (demo.precision, demo.optimizer, demo.micro_batch) == ("fp32", "adamw", 4)
    zero3 = workload_for_preset(load_preset("zero3-offload"))
    assert (zero3.precision, zero3.micro_batch, zero3.zero_init) == ("bf16", 8, True)
    assert workload_for_preset(load_preset("single-process")).precision == "fp32"  # mixed_precision: 'no'
    # The ZeRO reduce bucket the GPU total counts: the config's, else DeepSpeed's default (5e8, overlap_comm off).
    bucket = Preset(name="b", launcher="deepspeed", deepspeed={
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": True}})
    assert (workload_for_preset(bucket).reduce_bucket_size, workload_for_preset(bucket).overlap_comm) == (200_000_000, True)
    auto = Preset(name="a", launcher="deepspeed", deepspeed={"zero_optimization": {"reduce_bucket_size": "auto"}})
    assert (workload_for_preset(auto).reduce_bucket_size, workload_for_preset(auto).overlap_comm) == (500_000_000, False)


def test_the_preset_says_only_what_it_holds_and_a_micro_batch_derived_from_the_global_batch():
    assert preset_workload(load_preset("ddp")) == {"precision": "bf16"}  # no micro batch: the script's
    assert preset_workload(load_preset("zero2"))["micro_batch"] == 8
    # No train_micro_batch_size_per_gpu: DeepSpeed derives it from train_batch_size, accumulation and processes.
    derived = Preset(name="d", launcher="accelerate", accelerate={"num_processes": 4},
                     deepspeed={"train_batch_size": 64, "gradient_accumulation_steps": 2, "fp16": {"enabled": True}})
    assert preset_workload(derived) == {"precision": "fp16", "micro_batch": 8}
    uneven = Preset(name="u", launcher="accelerate", accelerate={"num_processes": 3},
                    deepspeed={"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto"})
    assert "micro_batch" not in preset_workload(uneven)


def test_model_shape_reads_counts_and_says_what_is_wrong(tmp_path):
    assert read_model_size("1.5B").total_params == 1_500_000_000
    with pytest.raises(QuantityError, match="model size"):
        read_model_size("1.5Q")
    with pytest.raises(QuantityError, match="empty"):
        read_model_size("  ")
    with pytest.raises(ModelConfigError, match="not found"):
        read_model_size(str(tmp_path / "missing" / "config.json"))


def test_a_model_too_big_for_available_host_ram_does_not_fit():
    free = FreeMemory(gpu_free_bytes=None, gpu_total_bytes=None, host_available_bytes=8 * GIB,
                      host_total_bytes=16 * GIB)
    check = check_preset(load_preset("cpu-demo"), shape_from_params(7_000_000_000), free=free)
    assert check.row.strategy == "zero2+opt-cpu" and check.row.gpus_per_node == 2
    assert check.verdict == "does not fit" and check.does_not_fit
    assert any("host RAM" in w and "OOM killer" in w for w in check.warnings)
    assert any("GPU: free memory unknown" in w for w in check.warnings)
    assert "no NVIDIA GPU found" in check.lines()[0]
    assert (check.gpu_verdict, check.host_verdict) == (None, "does not fit")
    assert [check.verdict_of(w) for w in check.warnings] == [None, "does not fit"]


def test_small_model_fits_and_only_the_gpus_the_run_uses_count():
    free = FreeMemory(gpu_free_bytes=(1 * GIB, 80 * GIB, 80 * GIB), gpu_total_bytes=(80 * GIB,) * 3,
                      host_available_bytes=500 * GIB, host_total_bytes=512 * GIB)
    shape = shape_from_params(125_000_000)
    preset = load_preset("zero2")
    # GPU 0 is nearly full: with it the run does not fit, on GPUs 1 and 2 it does.
    assert check_preset(preset, shape, nproc=2, free=free).verdict == "does not fit"
    check = check_preset(preset, shape, nproc=2, free=free, env={"CUDA_VISIBLE_DEVICES": "1,2"})
    assert check.verdict == "fits" and check.warnings == [] and check.gpu_free_bytes == 80 * GIB


def test_nothing_known_about_the_machine_is_unknown_not_fits():
    free = FreeMemory(None, None, None, None)
    check = check_preset(load_preset("zero2"), shape_from_params(10**9), free=free)
    assert check.verdict == "unknown" and not check.does_not_fit and len(check.warnings) == 2
