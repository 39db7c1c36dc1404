"""The estimate against a real GPU run: tests/fixtures/gpu_estimate_h200.json (traindeck's GPU check on an
NVIDIA H200, torch 2.11.0+cu130, DeepSpeed 0.19.8): a 1.07e9-parameter bf16 AdamW model under ZeRO-2 on one GPU.

The figures are torch's allocator counters read inside the rank and the rank's NVML peak as traindeck recorded it.
The estimate's inputs are those tests/gpu/gpu_check.py passes to `traindeck estimate`.
"""

from __future__ import annotations

import json

from support import TESTS

from traindeck.backend.estimate import GIB, Machine, Workload, estimate_rows, shape_from_params
from traindeck.backend.estimate.activations import CUDA_CONTEXT_BYTES
from traindeck.backend.estimate.model_states import (
    REDUCE_BUCKET_SIZE,
    state_bytes,
    zero2_model_states,
    zero12_allocator_reserve,
    zero12_step_buffers,
)

RECORD = json.loads((TESTS / "fixtures" / "gpu_estimate_h200.json").read_text())
RUN = next(r for r in RECORD["runs"] if r["name"] == "gpu-estimate")


def _zero2_row():
    e = RUN["estimate_inputs"]
    shape = shape_from_params(e["params"], e["largest_layer"], e["hidden_size"], e["layers"])
    machine = Machine(e["gpus_per_node"], e["num_nodes"], RECORD["machine"]["gpu_memory_bytes"], None)
    workload = Workload(precision=e["precision"], optimizer=e["optimizer"], micro_batch=e["micro_batch"],
                        seq_len=e["seq_len"])
    return next(r for r in estimate_rows(shape, machine, workload) if r.strategy == "zero2")


def test_the_zero2_estimate_lands_within_ten_percent_of_the_nvml_peak():
    row = _zero2_row()
    assert RUN["state"] == "succeeded" and RUN["params"] == row.gpu_bytes_per_device // 20
    ratio = RUN["nvml_rank_peak_bytes"] / row.gpu_total_bytes_per_device
    assert 0.9 <= ratio <= 1.1, (ratio, row.gpu_total_bytes_per_device / GIB)


def test_each_part_matches_what_torch_counted():
    # The parts, not only the sum: tensors against torch's peak allocated, tensors + allocator reserve against its
    # peak reserved, and the CUDA context against what NVML counts beyond torch's reserved.
    n = RUN["params"]
    sb = state_bytes("bf16", "adamw")
    _, states = zero2_model_states(n, 1, 1, cpu_offload=False)
    step = zero12_step_buffers(n, 1, sb, 2, REDUCE_BUCKET_SIZE, overlap_comm=False)
    row = _zero2_row()
    # 2 bf16 params + 4 fp32 master + 8 Adam + 2 bf16 gradient partition + 4 fp32 gradient partition (DeepSpeed's
    # 20 bytes) + the 2-byte flat copy step() makes: 22 GiB. Torch's peak is 22 GiB + 64 MiB (small tensors, likely
    # the cuBLAS workspaces torch allocates through its allocator).
    assert states + step == 22 * GIB
    tensors = states + step + row.activation_bytes_per_device
    assert 0.98 <= RUN["torch_max_allocated_bytes"] / tensors <= 1.02
    reserve = zero12_allocator_reserve(n, 1, sb, row.activation_bytes_per_device)
    assert 0.98 <= RUN["torch_max_reserved_bytes"] / (tensors + reserve) <= 1.02
    outside_torch = RUN["nvml_rank_peak_bytes"] - RUN["torch_max_reserved_bytes"]
    assert abs(outside_torch - CUDA_CONTEXT_BYTES) <= 16 * 2**20
    # After deepspeed.initialize: the bf16 flat parameters and the fp32 master partition (6 bytes a parameter);
    # after a step Adam's two moments are there too (14).
    assert RUN["torch_allocated_after_initialize_bytes"] == 6 * n
    assert 14 * n <= RUN["torch_allocated_after_step_bytes"] <= 14 * n + 65 * 2**20


def test_the_cuda_context_figure_is_what_every_recorded_run_shows():
    for run in RECORD["runs"]:
        outside_torch = run["nvml_rank_peak_bytes"] - run["torch_max_reserved_bytes"]
        assert abs(outside_torch - CUDA_CONTEXT_BYTES) <= 16 * 2**20, run["name"]


def test_more_gpus_shrink_the_step_buffers_until_the_bucket_decides():
    n, sb = 7_000_000_000, state_bytes("bf16", "adamw")
    # Few GPUs: the 16-bit flat copy of the gradient partition (2 / N bytes a parameter) at the step.
    assert zero12_step_buffers(n, 1, sb, 2) == 2 * n
    assert zero12_step_buffers(n, 8, sb, 2) == 2 * n // 8
    # ZeRO-1's formula lacks the fp32 gradient partition: its step adds (2 + 4) / N.
    assert zero12_step_buffers(n, 8, sb, 1) == 6 * n // 8
    # Many GPUs: the IPG bucket (5e8 bf16 elements, two with overlap_comm) in backward outweighs the step, less the
    # fp32 gradient partition that backward does not hold yet.
    assert zero12_step_buffers(n, 512, sb, 2, overlap_comm=True) == 2 * REDUCE_BUCKET_SIZE * 2 - 4 * n // 512
    # fp32 training: the cast is a no-op, the formula already counts the copy.
    assert zero12_step_buffers(n, 1, state_bytes("fp32", "adamw"), 2) == 0
