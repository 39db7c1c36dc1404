"""Model-state arithmetic against DeepSpeed's own estimators, the 16-byte rule, activations, and quantity parsing."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from traindeck.backend.estimate import GIB, QuantityError, parse_count, parse_size, shape_from_params
from traindeck.backend.estimate.activations import activation_bytes, gpu_total_bytes
from traindeck.backend.estimate.model_states import (
    stage0_model_states,
    stage1_model_states,
    state_bytes,
    zero2_model_states,
    zero3_model_states,
    zero3_nvme_model_states,
)

SIZES = [125_000_000, 350_000_000, 1_300_000_000, 2_700_000_000, 7_000_000_000, 13_000_000_000, 30_000_000_000,
         70_000_000_000]
GPUS = [1, 2, 4, 8]
NODES = [1, 2, 4]


def _close(mine: float, theirs: float) -> bool:
    return abs(mine - theirs) <= 0.01 * abs(theirs)


@pytest.fixture(scope="module")
def deepspeed_estimators():
    pytest.importorskip("torch")
    stage_1_and_2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    return stage_1_and_2.estimate_zero2_model_states_mem_needs, stage3.estimate_zero3_model_states_mem_needs


@pytest.mark.train
def test_zero2_equals_deepspeed_over_the_grid(deepspeed_estimators):
    ds_zero2, _ = deepspeed_estimators
    checked = 0
    for total, gpus, nodes, offload in itertools.product(SIZES, GPUS, NODES, (True, False)):
        theirs = ds_zero2(total, gpus, nodes, cpu_offload=offload, additional_buffer_factor=1.5)
        mine = zero2_model_states(total, gpus, nodes, cpu_offload=offload, additional_buffer_factor=1.5)
        assert _close(mine[0], theirs[0]) and _close(mine[1], theirs[1]), (total, gpus, nodes, offload, mine, theirs)
        assert mine == tuple(int(x) for x in theirs)  # in fact byte-exact
        checked += 1
    assert checked == len(SIZES) * len(GPUS) * len(NODES) * 2


@pytest.mark.train
def test_zero3_equals_deepspeed_over_the_grid(deepspeed_estimators):
    _, ds_zero3 = deepspeed_estimators
    checked = 0
    for total, gpus, nodes in itertools.product(SIZES, GPUS, NODES):
        largest = shape_from_params(total).largest_layer_params
        for offload, offload_params, zero_init in itertools.product((True, False), (True, False), (True, False)):
            if offload_params and not offload:
                continue  # DeepSpeed's table skips it too: parameter offload needs optimizer offload
            for factor in (1.5, 1.0):
                theirs = ds_zero3(total, largest, gpus, nodes, offload, offload_params, zero_init, factor)
                mine = zero3_model_states(total, largest, gpus, nodes, offload, offload_params, zero_init, factor)
                for m, t in zip(mine, theirs, strict=True):
                    assert _close(m, t), (total, gpus, nodes, offload, offload_params, zero_init, mine, theirs)
                assert mine == tuple(int(x) for x in theirs)
                checked += 1
    assert checked == len(SIZES) * len(GPUS) * len(NODES) * 6 * 2


def test_sixteen_bytes_per_parameter_for_plain_data_parallel():
    # bf16 weights 2 + bf16 grads 2 + fp32 master 4 + Adam m 4 + v 4 = 16 (not 14).
    assert state_bytes("bf16", "adamw").data_parallel == 16
    assert state_bytes("fp16", "adam").data_parallel == 16
    assert state_bytes("fp32", "adamw").data_parallel == 16  # 4 + 4 + no master + 8
    cpu, gpu = stage0_model_states(1_000_000_000, num_gpus_per_node=8)
    assert gpu == 16_000_000_000
    assert cpu == 1_000_000_000 * 4 * 8 * 1.5  # every local rank loads the fp32 model


def test_zero1_partitions_optimizer_states_only():
    total = 1_000_000_000
    # 2 + 2 bytes of weights and grads stay whole; the 12 optimizer bytes (master + m + v) split across 8 GPUs.
    _, gpu = stage1_model_states(total, num_gpus_per_node=4, num_nodes=2)
    assert gpu == 4 * total + 12 * total // 8
    _, one = stage1_model_states(total, 1, 1)
    assert one == stage0_model_states(total, 1, 1)[1]  # nothing to partition on one GPU


def test_other_optimizers_change_only_the_state_bytes():
    assert state_bytes("bf16", "sgd").data_parallel == 12
    assert state_bytes("bf16", "adamw8bit").data_parallel == 10
    _, gpu = zero2_model_states(1_000_000, 1, 1, cpu_offload=False, sb=state_bytes("bf16", "lion"))
    assert gpu == 2_000_000 + 14_000_000  # 2 + (2 + 4 + 4 + 4)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        state_bytes("bf16", "rmsprop")


def test_nvme_rows_move_optimizer_states_to_disk():
    total, largest = 13_000_000_000, 163_840_000
    nv = zero3_nvme_model_states(total, largest, 1, 1, offload_param="nvme")
    cpu_row = zero3_model_states(total, largest, 1, 1, True, True, True)
    assert nv.gpu_bytes_per_device == cpu_row[1] == 4 * largest
    assert nv.disk_bytes_per_node == (16 + 2) * total
    # host: the zero.Init load of the largest layer x 1.5 + optimizer swap buffers 4 x min(1e9, 13e9) x 4 B
    # + parameter swap buffers 5 x max(1e8, largest layer) x 2 B (DeepSpeed needs a buffer to hold the largest layer)
    assert nv.cpu_bytes_per_node == int(largest * 4 * 1.5 + 4 * 1_000_000_000 * 4 + 5 * largest * 2)
    assert nv.cpu_bytes_per_node < cpu_row[0] / 10


def test_activation_formula_by_hand():
    s, b, h, L, a, V = 2048, 1, 4096, 32, 32, 32000
    # Korthikanti et al.: per layer s*b*h*(34 + 5*a*s/h) bytes with eager attention.
    eager = activation_bytes(s, b, h, L, a, V, checkpointing=False, attention="eager")
    assert eager == L * (34 * s * b * h + 5 * a * s * s * b) + 4 * s * b * V
    sdpa = activation_bytes(s, b, h, L, a, V)
    assert sdpa == L * 34 * s * b * h + 4 * s * b * V == 9_388_949_504
    # Full checkpointing: 2*s*b*h per layer kept, one layer rebuilt at a time.
    ckpt = activation_bytes(s, b, h, L, a, V, checkpointing=True)
    assert ckpt == L * 2 * s * b * h + 34 * s * b * h + 4 * s * b * V
    assert activation_bytes(s, b, h, L, a, V, precision="fp32") == 2 * L * 34 * s * b * h + 4 * s * b * V
    total, overhead = gpu_total_bytes(10 * GIB, 2 * GIB)
    assert total == int(12 * GIB * 1.1) + 1300 * 2**20 and overhead == total - 12 * GIB


@pytest.mark.parametrize(
    "text, expected",
    [("1.5B", 1_500_000_000), ("350M", 350_000_000), ("125k", 125_000), ("7e9", 7_000_000_000),
     (1.5e9, 1_500_000_000), ("1,500,000", 1_500_000), ("70b", 70_000_000_000), (" 2.7 B ", 2_700_000_000)],
)
def test_parse_count(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.5X", "-3", "0", "1.5BB", True])
def test_parse_count_rejects_with_one_line(text):
    with pytest.raises(QuantityError) as info:
        parse_count(text, "--params")
    assert "\n" not in str(info.value) and str(info.value).startswith("--params")


def test_parse_size():
    assert parse_size("80") == 80 * GIB
    assert parse_size("24GiB") == 24 * GIB
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size("80GB") == 80 * 10**9
    with pytest.raises(QuantityError):
        parse_size("lots")
    with pytest.raises(QuantityError):
        parse_size("0")


def test_largest_layer_default_is_the_embedding_and_said():
    shape = shape_from_params(7_000_000_000)
    assert shape.largest_layer_params == 32_000 * shape.hidden_size
    assert shape.hidden_size % 128 == 0 and 4000 <= shape.hidden_size <= 4400
    assert any("largest layer not given" in a for a in shape.assumptions)
    assert shape_from_params(1_000, largest_layer_params=None).largest_layer_params <= 1_000
    given = shape_from_params(7_000_000_000, largest_layer_params=131_072_000)
    assert not any("largest layer" in a for a in given.assumptions)


def test_importing_the_estimator_loads_no_heavy_module():
    code = (
        "import sys, traindeck.backend.estimate as e; e.estimate_rows(e.shape_from_params(7e9), e.Machine(1, 1, 80 << 30));"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'deepspeed', 'accelerate', 'pynvml'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
