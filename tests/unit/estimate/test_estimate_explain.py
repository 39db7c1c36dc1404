"""Issue 12: ZeRO-2 showed more GPU memory than ZeRO-1 (154.6 vs 126.0 GiB on one GPU) without a word why."""

from __future__ import annotations

from traindeck.backend.estimate import GIB, Machine, Workload, estimate_rows, shape_from_params
from traindeck.backend.estimate.explain import zero2_above_zero1
from traindeck.backend.estimate.model_states import stage1_model_states, zero2_model_states


def test_the_two_formulas_cross_at_three_gpus():
    params = 1_000_000_000
    for gpus, zero2_higher in ((1, True), (2, True), (3, False), (4, False), (8, False)):
        _, one = stage1_model_states(params, num_gpus_per_node=gpus)
        _, two = zero2_model_states(params, num_gpus_per_node=gpus, cpu_offload=False)
        # ZeRO-1: 2 + 2 + 12/N bytes per parameter; ZeRO-2 (DeepSpeed's): 2 + 18/N.
        assert one == 4 * params + 12 * params // gpus
        assert two == 2 * params + 18 * params // gpus
        assert (two > one) is zero2_higher, gpus


def test_the_estimate_explains_it_where_it_happens_and_only_there():
    shape = shape_from_params(7_000_000_000)
    one_gpu = estimate_rows(shape, Machine(gpus_per_node=1, gpu_mem_bytes=80 * GIB, host_mem_bytes=256 * GIB),
                            Workload())
    text = zero2_above_zero1(one_gpu)
    assert text is not None
    assert "2 + 18/1" in text and "2 + 2 + 12/1" in text and "same optimizer" in text
    by = {r.strategy: r for r in one_gpu}
    assert f"{by['zero2'].gpu_bytes_per_device / GIB:.1f} GiB" in text
    # The GPU totals count DeepSpeed's fp32 gradient partition for ZeRO-1 too: there ZeRO-2 is never above it.
    for gpus in (1, 2, 3, 4, 8):
        rows = {r.strategy: r for r in estimate_rows(shape, Machine(gpus_per_node=gpus), Workload())}
        assert rows["zero2"].gpu_total_bytes_per_device <= rows["zero1"].gpu_total_bytes_per_device, gpus
    eight = estimate_rows(shape, Machine(gpus_per_node=8, gpu_mem_bytes=80 * GIB, host_mem_bytes=256 * GIB),
                          Workload())
    assert zero2_above_zero1(eight) is None
