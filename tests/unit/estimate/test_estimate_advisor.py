"""The advisor on hand-worked cases, and the before-launch / after-run checks.

Every figure below is worked by hand in the comments (bytes; GiB = 2**30). The GPU total of a row is
int((model states + activations) x 1.1) + 1 GiB (fragmentation and CUDA context); activations with SDPA attention are
L x 34*s*b*h + 4*s*b*V (fp32 logits), or with checkpointing L x 2*s*b*h + 34*s*b*h + 4*s*b*V.
"Fits" means at most 85% of GPU memory and host RAM.
"""

from __future__ import annotations

import pytest

from traindeck.backend.estimate import (
    ADVICE_ORDER,
    GIB,
    Machine,
    Workload,
    advise,
    check_against_machine,
    compare_with_measured,
    describe_machine,
    estimate_rows,
    preset_for,
    preset_settings,
    shape_from_params,
)
from traindeck.backend.presets import BUILTIN_NAMES


def _advice(shape, machine, workload):
    rows = estimate_rows(shape, machine, workload)
    return advise(rows, workload), {r.strategy: r for r in rows}


def test_small_model_on_one_gpu_needs_no_zero():
    # GPT-2 small-like: 125M params, h 768, 12 layers, 12 heads, vocab 50257; one 24 GiB GPU, 64 GiB host.
    # model states 16 x 125e6 = 2.0e9; activations (s 1024, b 1) 12 x 34 x 1024 x 768 + 4 x 1024 x 50257
    #   = 320,864,256 + 205,852,672 = 526,716,928; total int(2,526,716,928 x 1.1) + 1300 MiB (1,363,148,800)
    #   = 4,142,537,420 = 3.86 GiB, 16% of 24 GiB. Host: 125e6 x 4 x 1 GPU x 1.5 = 0.75e9, 1% of 64 GiB.
    shape = shape_from_params(125_000_000, 38_597_376, 768, 12, 12, 50257)
    advice, rows = _advice(shape, Machine(1, 1, 24 * GIB, 64 * GIB), Workload(seq_len=1024))
    assert rows["dp"].gpu_bytes_per_device == 2_000_000_000
    assert rows["dp"].activation_bytes_per_device == 526_716_928
    assert rows["dp"].gpu_total_bytes_per_device == 4_142_537_420
    assert rows["dp"].cpu_bytes_per_node == 750_000_000
    assert advice.row is not None and advice.row.strategy == "dp" and advice.row.zero_stage == 0
    assert advice.preset == "single-process"
    assert advice.rejected == ()
    # The same model on four GPUs: plain data parallel, launched as DDP.
    advice4, _ = _advice(shape, Machine(4, 1, 24 * GIB, 64 * GIB), Workload(seq_len=1024))
    assert advice4.row.strategy == "dp" and advice4.preset == "ddp"


def test_seven_billion_on_one_gpu_needs_optimizer_offload():
    # Llama-2-7B-like 7e9 params, h 4096, 32 layers, 32 heads, vocab 32000; one 80 GiB GPU, 256 GiB host; s 2048, b 1.
    # activations 32 x 34 x 2048 x 4096 + 4 x 2048 x 32000 = 9,126,805,504 + 262,144,000 = 9,388,949,504.
    # no ZeRO on one GPU: 16 x 7e9 = 112e9; int(121,388,949,504 x 1.1) + 1300 MiB = 134,890,993,254 (157%): no.
    # ZeRO-1/2: 2 x 7e9 + 18 x 7e9 = 140e9 states (ZeRO-1: 112e9 + the 28e9 fp32 gradient partition) + the 14e9
    #   16-bit flat copy at the step + activations + reserve (14e9 - activations + 14e9) + 1300 MiB (> 180 GB): no.
    # ZeRO-2 + optimizer offload: GPU 2 x 7e9 = 14e9 -> int(23,388,949,504 x 1.1) + 1300 MiB = 27,090,993,254 (32%);
    #   host 7e9 x max(4 x 1, 16) x 1.5 = 168e9 = 156.5 GiB, 61% of 256 GiB: fits.
    shape = shape_from_params(7_000_000_000, 131_072_000, 4096, 32, 32, 32000)
    advice, rows = _advice(shape, Machine(1, 1, 80 * GIB, 256 * GIB), Workload(seq_len=2048))
    assert rows["dp"].gpu_total_bytes_per_device == 134_890_993_254
    assert rows["zero2"].gpu_bytes_per_device == 140_000_000_000
    assert rows["zero2+opt-cpu"].gpu_bytes_per_device == 14_000_000_000
    assert rows["zero2+opt-cpu"].gpu_total_bytes_per_device == 27_090_993_254
    assert rows["zero2+opt-cpu"].cpu_bytes_per_node == 168_000_000_000
    assert advice.row.strategy == "zero2+opt-cpu"
    assert (advice.row.zero_stage, advice.row.offload_optimizer, advice.row.offload_param) == (2, "cpu", "none")
    assert advice.preset == "zero2-offload"
    assert [r.strategy for r in advice.rejected] == ["dp", "zero1", "zero2"]
    assert all(r.verdict == "does not fit" for r in advice.rejected)
    assert advice.settings == {"accelerate.num_processes": 1, "deepspeed.train_micro_batch_size_per_gpu": 1}
    assert "nothing to partition" in advice.rejected[1].why


def test_two_and_a_half_billion_fits_zero2_across_four_gpus():
    # 2.5e9 params, h 2560, 32 layers, 32 heads, vocab 50304; four 32 GiB GPUs (34,359,738,368 B), 128 GiB host;
    # s 2048, b 1. activations 32 x 34 x 2048 x 2560 + 4 x 2048 x 50304 = 5,704,253,440 + 412,090,368
    #   = 6,116,343,808 (more than the 5e9 of cached 16-bit originals, so the allocator reserve keeps only the
    #   split remainder, 2 x 2.5e9 / 4 = 1.25e9); CUDA context 1300 MiB = 1,363,148,800.
    # no ZeRO: 16 x 2.5e9 = 40e9 -> int(46,116,343,808 x 1.1) + 1300 MiB (151%): does not fit.
    # ZeRO-1: (2 + 2) x 2.5e9 + 12 x 2.5e9 / 4 = 17.5e9 + step buffers (2 + 4) x 2.5e9 / 4 = 3.75e9 + activations
    #   + 1.25e9 + 1300 MiB = 29,979,492,608 (87.3%): tight, passed over.
    # ZeRO-2: 2 x 2.5e9 + 18 x 2.5e9 / 4 = 16.25e9 + step buffer 2 x 2.5e9 / 4 = 1.25e9 + activations + 1.25e9
    #   + 1300 MiB = 26,229,492,608 (76.3%): fits. host: 2.5e9 x 4 x 4 GPUs x 1.5 = 60e9 (44% of 128 GiB).
    shape = shape_from_params(2_500_000_000, 128_778_240, 2560, 32, 32, 50304)
    advice, rows = _advice(shape, Machine(4, 1, 32 * GIB, 128 * GIB), Workload(seq_len=2048))
    assert rows["dp"].verdict == "does not fit"
    assert rows["zero1"].gpu_bytes_per_device == 17_500_000_000
    assert rows["zero1"].gpu_total_bytes_per_device == 29_979_492_608 and rows["zero1"].verdict == "tight"
    assert rows["zero2"].gpu_bytes_per_device == 16_250_000_000
    assert rows["zero2"].gpu_total_bytes_per_device == 26_229_492_608 and rows["zero2"].verdict == "fits"
    assert rows["zero2"].cpu_bytes_per_node == 60_000_000_000
    assert advice.row.strategy == "zero2" and advice.preset == "zero2"
    assert advice.alternative_preset == "fsdp-shard-grad-op"
    assert [(r.strategy, r.verdict) for r in advice.rejected] == [("dp", "does not fit"), ("zero1", "tight")]


def test_thirteen_billion_needs_nvme_because_host_ram_is_too_small():
    # 13e9 params, h 5120, 40 layers, 40 heads, vocab 32000, largest layer 32000 x 5120 = 163,840,000; one 24 GiB
    # GPU, 48 GiB host (51,539,607,552 B), 1 TiB free NVMe; s 2048, b 1, activation checkpointing on.
    # activations 40 x 2 x 2048 x 5120 + 34 x 2048 x 5120 + 4 x 2048 x 32000 = 838,860,800 + 356,515,840 + 262,144,000
    #   = 1,457,520,640.
    # Anything keeping the 16-bit weights on the GPU (2 x 13e9 = 26e9 > 24 GiB) does not fit, so up to
    # ZeRO-3 + optimizer offload the GPU says no. ZeRO-3 + optimizer and parameter offload to CPU: GPU only
    # 4 x 163,840,000 = 655,360,000 (13%), but host 13e9 x 18 x 1.5 = 351e9 = 327 GiB > 48 GiB: does not fit.
    # Optimizer on NVMe, params on CPU: host 2 x 13e9 x 1.5 + 4 x 1e9 x 4 = 55e9 > 48 GiB: does not fit.
    # ZeRO-Infinity (both on NVMe): GPU int((655,360,000 + 1,457,520,640) x 1.1) + 1300 MiB = 3,687,317,504 (14%);
    #   host 163,840,000 x 4 x 1.5 + 4 x 1e9 x 4 + 5 x 163,840,000 x 2 = 18,621,440,000 (36%);
    #   NVMe (16 + 2) x 13e9 = 234e9 of 1 TiB: fits.
    shape = shape_from_params(13_000_000_000, 163_840_000, 5120, 40, 40, 32000)
    machine = Machine(1, 1, 24 * GIB, 48 * GIB, disk_free_bytes=1024 * GIB)
    workload = Workload(seq_len=2048, activation_checkpointing=True)
    advice, rows = _advice(shape, machine, workload)
    assert rows["zero3+opt-cpu+param-cpu"].gpu_bytes_per_device == 655_360_000
    assert rows["zero3+opt-cpu+param-cpu"].cpu_bytes_per_node == 351_000_000_000
    assert rows["zero3+opt-cpu+param-cpu"].verdict == "does not fit"
    assert "host RAM" in rows["zero3+opt-cpu+param-cpu"].why
    assert rows["zero3+opt-nvme+param-cpu"].cpu_bytes_per_node == 55_000_000_000
    row = advice.row
    assert row.strategy == "zero3+opt-nvme+param-nvme"
    assert (row.offload_optimizer, row.offload_param) == ("nvme", "nvme")
    assert row.gpu_total_bytes_per_device == 3_687_317_504
    assert row.cpu_bytes_per_node == 18_621_440_000
    assert row.disk_bytes_per_node == 234_000_000_000
    assert advice.preset == "zero-infinity-nvme"
    # What differs from the built-in preset (2 processes, micro batch 8): one process, micro batch 1, the script's
    # activation checkpointing.
    assert advice.settings["accelerate.num_processes"] == 1
    assert advice.settings["deepspeed.train_micro_batch_size_per_gpu"] == 1
    assert "gradient_checkpointing_enable" in advice.settings["training script"]
    assert not any("offload" in key for key in advice.settings)
    assert [r.strategy for r in advice.rejected] == list(ADVICE_ORDER[:-1])
    # Every rejection is one sentence naming what decided it.
    for rejection in advice.rejected:
        assert rejection.why.count(". ") <= 1 and ("GPU" in rejection.why or "host RAM" in rejection.why)


def test_nvme_is_not_chosen_when_host_ram_holds_the_offload():
    # As above with 512 GiB of host RAM: ZeRO-3 + optimizer and parameter offload to CPU needs 351e9 = 327 GiB (64%).
    shape = shape_from_params(13_000_000_000, 163_840_000, 5120, 40, 40, 32000)
    advice, _ = _advice(shape, Machine(1, 1, 24 * GIB, 512 * GIB), Workload(activation_checkpointing=True))
    assert advice.row.strategy == "zero3+opt-cpu+param-cpu" and advice.preset == "zero3-offload"
    assert "deepspeed.zero_optimization.offload_param.device" not in advice.settings
    assert advice.alternative_preset == "fsdp-offload"


def test_nothing_fits_and_unknown_gpu_memory():
    # 70B on one 8 GiB GPU with 16 GiB host and no NVMe space: the embedding alone (4 x 1.04e9 B) and the swap
    # buffers leave nothing that fits.
    shape = shape_from_params(70_000_000_000)
    rows = estimate_rows(shape, Machine(1, 1, 8 * GIB, 16 * GIB, disk_free_bytes=100 * GIB), Workload())
    advice = advise(rows)
    assert advice.row is None and advice.preset is None and "nothing fits" in advice.reason
    assert advice.to_dict()["fits"] is False and advice.to_dict()["strategy"] is None
    # GPU memory unknown: "unknown", unless the host already rules a row out.
    partly = {r.strategy: r for r in estimate_rows(shape, Machine(1, 1, None, 16 * GIB), Workload())}
    assert partly["zero2+opt-cpu"].verdict == "does not fit" and partly["zero3"].verdict == "unknown"
    unknown = estimate_rows(shape, Machine(1, 1, None, 4096 * GIB, disk_free_bytes=4096 * GIB), Workload())
    assert {r.verdict for r in unknown} == {"unknown"} and all(r.fits is None for r in unknown)
    with pytest.raises(ValueError, match="--gpu-mem"):
        advise(unknown)


def test_tight_is_taken_when_nothing_fits_comfortably():
    # One GPU whose memory is 95% of dp's need, and host RAM too small for any offload: dp is tight and chosen.
    shape = shape_from_params(125_000_000, 38_597_376, 768, 12, 12, 50257)
    need = 4_142_537_420  # from the first test
    advice, _ = _advice(shape, Machine(1, 1, int(need / 0.95), 2 * GIB, disk_free_bytes=1), Workload(seq_len=1024))
    assert advice.row.strategy == "dp" and advice.row.verdict == "tight" and "tight" in advice.reason


def test_presets_are_builtin_names():
    shape = shape_from_params(1_000_000_000)
    for machine in (Machine(1, 1, 80 * GIB, 64 * GIB), Machine(8, 2, 80 * GIB, 64 * GIB)):
        for row in estimate_rows(shape, machine, Workload()):
            name, changes = preset_for(row)
            assert name in BUILTIN_NAMES, row.strategy
            assert all(k.startswith("zero_optimization.") for k in changes)


def test_check_against_machine_warns_before_an_oom_kill():
    shape = shape_from_params(7_000_000_000, 131_072_000, 4096, 32, 32, 32000)
    row = {r.strategy: r for r in estimate_rows(shape, Machine(1, 1, 80 * GIB, 256 * GIB), Workload())}["zero2+opt-cpu"]
    # needs 26.8e9 on the GPU and 168e9 on the host.
    assert check_against_machine(row, 70 * GIB, 200 * GIB) == []
    warnings = check_against_machine(row, [70 * GIB, 20 * GIB], 100 * GIB)
    assert len(warnings) == 2
    assert warnings[0].startswith("GPU:") and "CUDA out of memory" in warnings[0]
    assert warnings[1].startswith("host RAM:") and "exit code -9" in warnings[1] and "offloaded" in warnings[1]
    tight = check_against_machine(row, 28 * GIB, 170 * GIB)
    assert len(tight) == 2 and all("tight" in w for w in tight)
    unknown = check_against_machine(row, None, None)
    assert len(unknown) == 2 and all("unknown" in w for w in unknown)


def test_compare_with_measured():
    shape = shape_from_params(125_000_000, 38_597_376, 768, 12, 12, 50257)
    row = estimate_rows(shape, Machine(2, 1, 24 * GIB, 64 * GIB), Workload(seq_len=1024))[0]
    measured = {"peak_gpu_mem_bytes": 3_000_000_000, "peak_rank_rss_bytes": 600_000_000, "peak_host_used_bytes": None}
    table = compare_with_measured(row, measured)
    assert [c.what for c in table] == [
        "GPU memory per device (peak)",
        "host RAM per rank (peak RSS)",
        "host RAM per node (peak used)",
    ]
    what, estimated, got, ratio = table[0]
    assert estimated == row.gpu_total_bytes_per_device and got == 3_000_000_000
    assert ratio == pytest.approx(3_000_000_000 / estimated)
    assert table[1].estimated == row.cpu_bytes_per_node // 2 and table[1].ratio == pytest.approx(600e6 / (1.5e9 / 2))
    assert table[2].measured is None and table[2].ratio is None


def test_settings_name_what_differs_from_the_preset():
    # ZeRO-3 with the optimizer offloaded but the parameters kept on the GPUs: preset zero3-offload, minus param offload.
    shape = shape_from_params(7_000_000_000, 131_072_000, 4096, 32, 32, 32000)
    row = {r.strategy: r for r in estimate_rows(shape, Machine(2, 1, 80 * GIB, 512 * GIB), Workload())}["zero3+opt-cpu"]
    name, _ = preset_for(row)
    settings = preset_settings(name, row, Workload(micro_batch=8, precision="fp16", zero_init=False))
    assert name == "zero3-offload"
    assert settings == {
        "deepspeed.zero_optimization.offload_param.device": "none",
        "deepspeed.bf16.enabled": False,
        "deepspeed.fp16.enabled": True,
        "accelerate.deepspeed_config.zero3_init_flag": False,
    }


def test_machine_without_nvidia_driver(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as on a machine without the NVML library
    machine = describe_machine(host_mem_bytes=64 * GIB)
    assert machine.gpu_mem_bytes is None and machine.gpus_per_node == 1
    assert any("--gpu-mem" in note for note in machine.notes)
    given = describe_machine(gpus_per_node=4, gpu_mem_bytes=80 * GIB, host_mem_bytes=64 * GIB, detect=False)
    assert (given.total_gpus, given.gpu_mem_bytes, given.host_mem_bytes) == (4, 80 * GIB, 64 * GIB)
