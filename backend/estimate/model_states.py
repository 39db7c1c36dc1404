"""Model-state memory (parameters, gradients, optimizer state) per GPU and per node: DeepSpeed's arithmetic, no torch.

`zero2_model_states` and `zero3_model_states` reimplement DeepSpeed's
`deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs` and
`deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs` term for term (same multipliers, same int()
truncation), so that with 16-bit training and Adam(W) they return the same bytes (tests compare them on a grid).
Other precisions and optimizers change only the per-parameter byte counts, named in `StateBytes`.

Where DeepSpeed's numbers come from (16-bit params, Adam), bytes per parameter:
  2 fp16/bf16 parameters + 2 fp16/bf16 gradients + 4 fp32 master parameters + 4 + 4 Adam momentum and variance
  = 16 for plain data parallel. Write-ups that say 14 drop the 16-bit gradients (or count the master copy as the
  parameters): every rank holds both the 16-bit weights used in forward/backward and the fp32 master weights the
  optimizer updates, and the 16-bit gradients exist in full until they are reduced, so 16 is the floor.
  DeepSpeed's ZeRO-2/3 formulas use 18 for the partitioned part: 2 gradients16 + 4 gradients32 + 4 params32 +
  8 optimizer, i.e. they also count the fp32 gradient partition that DeepSpeed's ZeRO optimizer keeps.
The host ("CPU") figures include DeepSpeed's `additional_buffer_factor` (1.5 by default), and without offload they are
what loading the model needs: every local rank builds an fp32 copy (4 bytes x params x GPUs per node) unless
ZeRO-3's zero.Init (zero_init) builds it already partitioned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Precision = Literal["bf16", "fp16", "fp32"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp32")

# Optimizer state in bytes per parameter (the "K" of the ZeRO paper minus the fp32 master copy).
OPTIMIZER_STATE_BYTES: dict[str, int] = {
    "adamw": 8,  # fp32 momentum + fp32 variance (exact)
    "adam": 8,
    "lion": 4,  # one fp32 momentum
    "sgd": 4,  # fp32 momentum buffer; plain SGD without momentum keeps none
    "adamw8bit": 2,  # bitsandbytes: int8 momentum + int8 variance (block statistics ~0.4% more, not counted)
    "adafactor": 0,  # factored second moment: O(rows + cols) per matrix, negligible per parameter; no momentum
}
# DeepSpeed's CPU offload runs its own CPU optimizers for these (DeepSpeedCPUAdam, CPU Lion); others run as slow
# torch CPU optimizers only with zero_force_ds_cpu_optimizer: false.
OFFLOAD_NATIVE_OPTIMIZERS = frozenset({"adamw", "adam", "lion"})


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter for each kind of model state under one precision and optimizer."""

    param: int  # the weights forward/backward use (2 for bf16/fp16, 4 for fp32)
    grad: int  # their gradients, same dtype as the weights
    master: int  # fp32 master weights kept by the optimizer (0 when the weights are already fp32)
    optimizer: int  # optimizer state (8 for Adam)

    @property
    def data_parallel(self) -> int:
        """Plain data parallel: every rank holds everything (16 for bf16 + Adam)."""
        return self.param + self.grad + self.master + self.optimizer

    @property
    def partitioned(self) -> int:
        """What ZeRO-2/3 partitions in DeepSpeed's arithmetic: 18 for 16-bit + Adam (see the module docstring).

        The ZeRO optimizer always keeps an fp32 flat partition of parameters and of gradients (4 + 4) besides the
        optimizer state, whatever the training dtype.
        """
        return self.param + 4 + 4 + self.optimizer

    @property
    def offloaded(self) -> int:
        """What the optimizer offload moves to the host: fp32 params + fp32 grads + state (16 for Adam)."""
        return 4 + 4 + self.optimizer


def state_bytes(precision: str = "bf16", optimizer: str = "adamw") -> StateBytes:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_STATE_BYTES)}, got {optimizer!r}")
    p = 4 if precision == "fp32" else 2
    return StateBytes(param=p, grad=p, master=0 if p == 4 else 4, optimizer=OPTIMIZER_STATE_BYTES[optimizer])


ADAM_16BIT = state_bytes("bf16", "adamw")


def stage0_model_states(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    additional_buffer_factor: float = 1.5,
    sb: StateBytes = ADAM_16BIT,
) -> tuple[int, int]:
    """Plain data parallel (DDP, ZeRO stage 0): (cpu_bytes_per_node, gpu_bytes_per_device).

    GPU: 16 bytes per parameter with 16-bit weights and Adam (2 + 2 + 4 + 8; not 14, see the module docstring).
    Host: each local rank loads the model in fp32 before moving it, as in DeepSpeed's ZeRO-2 no-offload row.
    """
    gpu_mem = sb.data_parallel * total_params
    cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def stage1_model_states(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    additional_buffer_factor: float = 1.5,
    sb: StateBytes = ADAM_16BIT,
) -> tuple[int, int]:
    """ZeRO-1: (cpu_bytes_per_node, gpu_bytes_per_device).

    ZeRO-1 partitions the optimizer states only (fp32 master weights and Adam moments, 12 bytes) across all GPUs;
    every rank keeps the full 16-bit weights and full 16-bit gradients: 2 + 2 + 12 / total_gpus bytes per
    parameter, the ZeRO paper's (2 + 2 + K/N). It equals plain data parallel's 16 on one GPU. DeepSpeed runs
    ZeRO-1 with the same optimizer as ZeRO-2 and ships no stage-1 estimator; its ZeRO-2 formula counts an extra
    fp32 gradient partition, so on 1-2 GPUs the ZeRO-2 row can read higher than this one.
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpu_mem = (sb.param + sb.grad) * total_params + int((sb.master + sb.optimizer) * total_params / total_gpus)
    cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def zero2_model_states(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = 1.5,
    sb: StateBytes = ADAM_16BIT,
) -> tuple[int, int]:
    """DeepSpeed's `estimate_zero2_model_states_mem_needs`: (cpu_bytes_per_node, gpu_bytes_per_device).

    No offload: GPU 2 + 18 / total_gpus bytes per parameter; host 4 x GPUs per node x buffer factor (loading).
    Optimizer offload to CPU: GPU 2 bytes per parameter; host max(4 x total_gpus, 16) x buffer factor.
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = sb.param * total_params
        cpu_mem = total_params * max(4 * total_gpus, sb.offloaded) * additional_buffer_factor
    else:
        gpu_mem = sb.param * total_params + int(sb.partitioned * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


# DeepSpeed's zero_optimization defaults (runtime/zero/config.py): the IPG reduce bucket, in elements.
REDUCE_BUCKET_SIZE = 500_000_000


def zero12_step_buffers(
    total_params: int,
    total_gpus: int = 1,
    sb: StateBytes = ADAM_16BIT,
    stage: int = 2,
    reduce_bucket_size: int = REDUCE_BUCKET_SIZE,
    overlap_comm: bool = False,
) -> int:
    """GPU bytes DeepSpeed's ZeRO-1/2 optimizer (no offload) holds at its peak beyond this module's formula.

    From deepspeed/runtime/zero/stage_1_and_2.py (one optimizer for both stages): backward copies each gradient
    into the IPG bucket (reduce_bucket_size elements of the 16-bit dtype, two with overlap_comm) and its own
    partition's share into `grads_in_partition` (the 16-bit gradient partition). `step()` then flattens that
    partition into a new 16-bit tensor (`flatten_dense_tensors_aligned`/`flatten`) while the partition is still
    referenced, and casts the copy to an fp32 gradient partition; from the second step on Adam's moments are there
    too. So the step holds a 16-bit copy of the partition (2 / total_gpus bytes per parameter) that no formula
    counts, plus the fp32 gradient partition (4 / total_gpus), which DeepSpeed's ZeRO-2 formula counts and the
    ZeRO-1 formula here does not. Backward holds the bucket but not the fp32 partition. The peak takes the larger
    phase. In fp32 training the cast is a no-op: the flat copy is the fp32 gradient itself.
    """
    flat_copy = sb.grad * total_params / total_gpus if sb.grad < 4 else 0
    fp32_grad_partition = 4 * total_params / total_gpus
    buckets = reduce_bucket_size * sb.grad * (2 if overlap_comm else 1)
    if stage == 2:  # the formula's 18 / total_gpus includes the fp32 gradient partition
        return int(max(flat_copy, buckets - fp32_grad_partition, 0))
    return int(max(flat_copy + (fp32_grad_partition if sb.grad < 4 else 0), buckets))


def zero12_allocator_reserve(
    total_params: int, total_gpus: int = 1, sb: StateBytes = ADAM_16BIT, activations: int = 0
) -> int:
    """GPU bytes torch's caching allocator keeps reserved but unallocated at ZeRO-1/2's peak (NVML counts them).

    Large blocks get segments of their own rounded size, freed blocks stay cached and segments are never merged:
      - the engine moves the model to the GPU one tensor per parameter (16-bit), then ZeRO flattens them into
        one buffer and frees the originals; their segments stay cached (param bytes x params) and only tensors
        that fit in one of them reuse them: activations do, so those count against this part;
      - at the step, the 16-bit flat copy is cut from the free segment the fp32 gradient partition had the step
        before, so the fp32 cast cannot reuse it and takes a new segment of its own size; the rest of the old one
        ((4 - 2) / total_gpus bytes per parameter) stays free. fp32 training has no separate copy.
    """
    cached_originals = max(0, sb.param * total_params - activations)
    split_remainder = (4 - sb.grad) * total_params / total_gpus if sb.grad < 4 else 0
    return int(cached_originals + split_remainder)


def zero3_model_states(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
    sb: StateBytes = ADAM_16BIT,
) -> tuple[int, int, int]:
    """DeepSpeed's `estimate_zero3_model_states_mem_needs`: (cpu_bytes_per_node, gpu_bytes_per_device,
    largest_layer_bytes).

    The GPU always holds the largest layer gathered in 16 bits with its gradient (4 bytes per parameter of it).
    No offload: + 18 / total_gpus bytes per parameter. Optimizer offload: + 2 / total_gpus (the 16-bit param
    partition), host 16 / nodes. Optimizer + parameter offload: nothing more on the GPU, host 18 / nodes.
    Without zero_init each local rank first loads the whole model in fp32 (the max(4 x GPUs per node, ...) terms).
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = (sb.param + sb.grad) * largest_layer_params
    host_state = sb.offloaded  # 16: fp32 params, fp32 grads, Adam moments
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * (host_state + sb.param) * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = (
                    total_params
                    * max(4 * num_gpus_per_node, (host_state + sb.param) * gpus_factor)
                    * additional_buffer_factor
                )
        else:
            gpu_mem = largest_layer_memory + int(sb.param * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * host_state * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, host_state * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(sb.partitioned * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), int(largest_layer_memory)


# ZeRO-Infinity (NVMe) defaults from DeepSpeed's config: offload_optimizer.buffer_count, offload_param.buffer_count
# and .buffer_size, zero_optimization.sub_group_size.
NVME_OPTIMIZER_BUFFER_COUNT = 4
NVME_PARAM_BUFFER_COUNT = 5
NVME_PARAM_BUFFER_SIZE = 100_000_000
SUB_GROUP_SIZE = 1_000_000_000


@dataclass(frozen=True)
class NvmeStates:
    cpu_bytes_per_node: int  # host RAM still needed: what stays in RAM (x buffer factor) + pinned swap buffers
    gpu_bytes_per_device: int
    disk_bytes_per_node: int  # what the NVMe path must hold on each node


def zero3_nvme_model_states(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    offload_param: Literal["none", "cpu", "nvme"] = "nvme",
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
    sb: StateBytes = ADAM_16BIT,
    sub_group_size: int = SUB_GROUP_SIZE,
) -> NvmeStates:
    """ZeRO-3 with the optimizer offloaded to NVMe (ZeRO-Infinity); DeepSpeed ships no estimator for it.

    GPU: as the matching CPU-offload row of `zero3_model_states`.
    Disk per node: the optimizer's 16 bytes per parameter (fp32 params, fp32 grads, moments) for the node's share,
    plus the 16-bit parameters when they go to NVMe too.
    Host per node: what stays in RAM (the 16-bit params when offload_param is cpu; the model load without zero_init;
    the largest layer per rank with it) x buffer factor, plus pinned swap buffers per rank: the optimizer swapper's
    buffer_count (4) x the largest sub-group (min(sub_group_size, params / total_gpus)) in fp32, and with parameters
    on NVMe the parameter swapper's buffer_count (5) x max(buffer_size 1e8, largest layer) in 16 bits.
    """
    total_gpus = num_nodes * num_gpus_per_node
    largest_layer_memory = (sb.param + sb.grad) * largest_layer_params
    if offload_param == "none":
        gpu_mem = largest_layer_memory + int(sb.param * total_params / total_gpus)
    else:
        gpu_mem = largest_layer_memory
    disk = sb.offloaded * total_params / num_nodes
    resident = 0.0
    if offload_param == "cpu":
        resident = sb.param * total_params / num_nodes
    elif offload_param == "nvme":
        disk += sb.param * total_params / num_nodes
    load = (largest_layer_params if zero_init else total_params) * 4 * num_gpus_per_node
    largest_sub_group = min(sub_group_size, -(-total_params // total_gpus))
    pinned = NVME_OPTIMIZER_BUFFER_COUNT * largest_sub_group * 4
    if offload_param == "nvme":
        pinned += NVME_PARAM_BUFFER_COUNT * max(NVME_PARAM_BUFFER_SIZE, largest_layer_params) * sb.param
    cpu_mem = max(load, resident) * additional_buffer_factor + pinned * num_gpus_per_node
    return NvmeStates(int(cpu_mem), int(gpu_mem), int(disk))
