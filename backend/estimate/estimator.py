"""One row per training strategy: model states (DeepSpeed's arithmetic), activations, overhead, and a verdict.

A verdict judges GPU memory per device and host RAM per node (and NVMe free space for ZeRO-Infinity rows):
"fits" when every figure is within TIGHT_FRACTION of what the machine has, "tight" when one is above that share
but within the whole, "does not fit" when one exceeds it, "unknown" when the GPU memory is not known.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from traindeck.backend.estimate.activations import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_FACTOR,
    activation_bytes,
    gpu_total_bytes,
)
from traindeck.backend.estimate.machine import Machine
from traindeck.backend.estimate.model_shape import ModelShape
from traindeck.backend.estimate.model_states import (
    OFFLOAD_NATIVE_OPTIMIZERS,
    REDUCE_BUCKET_SIZE,
    stage0_model_states,
    stage1_model_states,
    state_bytes,
    zero2_model_states,
    zero3_model_states,
    zero3_nvme_model_states,
    zero12_allocator_reserve,
    zero12_step_buffers,
)
from traindeck.backend.estimate.quantity import GIB

Offload = Literal["none", "cpu", "nvme"]
Verdict = Literal["fits", "tight", "does not fit", "unknown"]
TIGHT_FRACTION = 0.85


@dataclass(frozen=True)
class Workload:
    """How the model is trained: what, besides the model, decides memory."""

    precision: str = "bf16"
    optimizer: str = "adamw"
    micro_batch: int = 1
    seq_len: int = 2048
    activation_checkpointing: bool = False
    attention: str = "sdpa"
    zero_init: bool = True  # ZeRO-3 builds the model partitioned (deepspeed.zero.Init / accelerate zero3_init_flag)
    additional_buffer_factor: float = 1.5  # DeepSpeed's default for its host figures
    cuda_context_bytes: int = CUDA_CONTEXT_BYTES
    fragmentation: float = FRAGMENTATION_FACTOR
    reduce_bucket_size: int = REDUCE_BUCKET_SIZE  # DeepSpeed's zero_optimization.reduce_bucket_size (elements)
    overlap_comm: bool = False  # DeepSpeed's zero_optimization.overlap_comm (default off below ZeRO-3): 2 buckets

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Strategy:
    """A way to train: which framework, which ZeRO stage (or its FSDP equivalent), what is offloaded where."""

    name: str  # stable id used in JSON and by the advisor
    label: str  # what a person reads
    framework: Literal["ddp", "deepspeed", "fsdp"]
    zero_stage: int  # for FSDP rows: the ZeRO stage whose arithmetic they share
    offload_optimizer: Offload = "none"
    offload_param: Offload = "none"


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("dp", "plain data parallel (no ZeRO)", "ddp", 0),
    Strategy("zero1", "ZeRO-1", "deepspeed", 1),
    Strategy("zero2", "ZeRO-2", "deepspeed", 2),
    Strategy("zero2+opt-cpu", "ZeRO-2 + optimizer offload (CPU)", "deepspeed", 2, "cpu"),
    Strategy("zero3", "ZeRO-3", "deepspeed", 3),
    Strategy("zero3+opt-cpu", "ZeRO-3 + optimizer offload (CPU)", "deepspeed", 3, "cpu"),
    Strategy("zero3+opt-cpu+param-cpu", "ZeRO-3 + optimizer and param offload (CPU)", "deepspeed", 3, "cpu", "cpu"),
    Strategy("zero3+opt-nvme", "ZeRO-3 + optimizer offload (NVMe)", "deepspeed", 3, "nvme"),
    Strategy("zero3+opt-nvme+param-cpu", "ZeRO-3 + optimizer NVMe, params CPU", "deepspeed", 3, "nvme", "cpu"),
    Strategy("zero3+opt-nvme+param-nvme", "ZeRO-Infinity: optimizer and params NVMe", "deepspeed", 3, "nvme", "nvme"),
    Strategy("fsdp-no-shard", "FSDP NO_SHARD (~ no ZeRO)", "fsdp", 0),
    Strategy("fsdp-shard-grad-op", "FSDP SHARD_GRAD_OP (~ ZeRO-2)", "fsdp", 2),
    Strategy("fsdp-full-shard", "FSDP FULL_SHARD (~ ZeRO-3)", "fsdp", 3),
    Strategy("fsdp-full-shard+offload", "FSDP FULL_SHARD + CPU offload (~ ZeRO-3 offload)", "fsdp", 3, "cpu", "cpu"),
)
STRATEGY_BY_NAME = {s.name: s for s in STRATEGIES}


@dataclass(frozen=True)
class EstimateRow:
    strategy: str
    label: str
    framework: str
    zero_stage: int
    offload_optimizer: Offload
    offload_param: Offload
    zero_init: bool | None  # only ZeRO-3 rows depend on it
    gpu_bytes_per_device: int  # model states only, DeepSpeed's arithmetic
    cpu_bytes_per_node: int  # host RAM per node, DeepSpeed's arithmetic (incl. its buffer factor)
    disk_bytes_per_node: int  # NVMe space per node (ZeRO-Infinity rows), else 0
    activation_bytes_per_device: int
    overhead_bytes_per_device: int  # CUDA context + allocator reserve (+ DeepSpeed's step buffers for ZeRO-2)
    gpu_total_bytes_per_device: int
    gpus_per_node: int
    num_nodes: int
    gpu_fraction: float | None  # gpu_total / GPU memory
    host_fraction: float | None  # cpu_bytes_per_node / host RAM
    disk_fraction: float | None
    verdict: Verdict
    fits: bool | None  # True for fits and tight, False for does not fit, None when unknown
    why: str  # one sentence on the verdict
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d


def _judge(need: int, have: int | None) -> tuple[float | None, Verdict]:
    if have is None:
        return None, "unknown"
    fraction = need / have
    if fraction > 1:
        return fraction, "does not fit"
    if fraction > TIGHT_FRACTION:
        return fraction, "tight"
    return fraction, "fits"


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def estimate_row(strategy: Strategy, shape: ModelShape, machine: Machine, workload: Workload) -> EstimateRow:
    sb = state_bytes(workload.precision, workload.optimizer)
    n, ll = shape.total_params, shape.largest_layer_params
    gpn, nodes, abf = machine.gpus_per_node, machine.num_nodes, workload.additional_buffer_factor
    disk = 0
    zero_init: bool | None = None
    notes: list[str] = []
    if strategy.zero_stage == 0:
        cpu, gpu = stage0_model_states(n, gpn, nodes, abf, sb)
    elif strategy.zero_stage == 1:
        cpu, gpu = stage1_model_states(n, gpn, nodes, abf, sb)
    elif strategy.zero_stage == 2:
        cpu, gpu = zero2_model_states(n, gpn, nodes, strategy.offload_optimizer == "cpu", abf, sb)
    else:
        zero_init = workload.zero_init
        if strategy.offload_optimizer == "nvme":
            nv = zero3_nvme_model_states(n, ll, gpn, nodes, strategy.offload_param, zero_init, abf, sb)
            cpu, gpu, disk = nv.cpu_bytes_per_node, nv.gpu_bytes_per_device, nv.disk_bytes_per_node
            notes.append("NVMe arithmetic is traindeck's (DeepSpeed ships no estimator for it)")
        else:
            cpu, gpu, _ = zero3_model_states(
                n, ll, gpn, nodes, strategy.offload_optimizer == "cpu", strategy.offload_param == "cpu", zero_init, abf, sb
            )
    if strategy.framework == "fsdp":
        notes.append(f"FSDP figures use DeepSpeed's ZeRO-{strategy.zero_stage} arithmetic (equivalent sharding)")
    if strategy.offload_optimizer != "none" and workload.optimizer not in OFFLOAD_NATIVE_OPTIMIZERS:
        notes.append(f"{workload.optimizer} has no DeepSpeed CPU kernel: offloaded steps run as a slow torch CPU optimizer")

    act = activation_bytes(
        workload.seq_len,
        workload.micro_batch,
        shape.hidden_size,
        shape.num_layers,
        shape.num_heads,
        shape.vocab_size,
        workload.activation_checkpointing,
        workload.attention,
        workload.precision,
    )
    reserve: int | None = None
    working = 0
    if strategy.framework == "deepspeed" and strategy.zero_stage in (1, 2) and strategy.offload_optimizer == "none":
        gpus = gpn * nodes
        working = zero12_step_buffers(n, gpus, sb, strategy.zero_stage, workload.reduce_bucket_size,
                                      workload.overlap_comm)
        reserve = zero12_allocator_reserve(n, gpus, sb, act)
        notes.append(f"GPU total adds DeepSpeed's step buffers beyond its formula ({_gib(working)}), the allocator's "
                     f"reserve ({_gib(reserve)}) and the CUDA context ({_gib(workload.cuda_context_bytes)})")
    total, overhead = gpu_total_bytes(gpu + working, act, workload.cuda_context_bytes, workload.fragmentation, reserve)
    overhead += working

    gpu_fraction, gpu_verdict = _judge(total, machine.gpu_mem_bytes)
    host_fraction, host_verdict = _judge(cpu, machine.host_mem_bytes)
    disk_fraction: float | None = None
    disk_verdict: Verdict = "fits"
    if strategy.offload_optimizer == "nvme" or strategy.offload_param == "nvme":
        disk_fraction, disk_verdict = _judge(disk, machine.disk_free_bytes)
        if disk_verdict == "unknown":
            notes.append("NVMe free space not checked: give --nvme-path or --disk-free")
            disk_verdict = "fits"
    if host_verdict == "unknown":
        notes.append("host RAM unknown: not checked")
        host_verdict = "fits"

    verdict, why = _verdict(
        strategy, total, cpu, disk, machine, (gpu_verdict, gpu_fraction), (host_verdict, host_fraction),
        (disk_verdict, disk_fraction),
    )
    return EstimateRow(
        strategy=strategy.name,
        label=strategy.label,
        framework=strategy.framework,
        zero_stage=strategy.zero_stage,
        offload_optimizer=strategy.offload_optimizer,
        offload_param=strategy.offload_param,
        zero_init=zero_init,
        gpu_bytes_per_device=gpu,
        cpu_bytes_per_node=cpu,
        disk_bytes_per_node=disk,
        activation_bytes_per_device=act,
        overhead_bytes_per_device=overhead,
        gpu_total_bytes_per_device=total,
        gpus_per_node=gpn,
        num_nodes=nodes,
        gpu_fraction=gpu_fraction,
        host_fraction=host_fraction,
        disk_fraction=disk_fraction,
        verdict=verdict,
        fits=None if verdict == "unknown" else verdict != "does not fit",
        why=why,
        notes=tuple(notes),
    )


_RANK = {"fits": 0, "tight": 1, "unknown": 2, "does not fit": 3}


def _verdict(
    strategy: Strategy,
    gpu_total: int,
    cpu: int,
    disk: int,
    machine: Machine,
    gpu: tuple[Verdict, float | None],
    host: tuple[Verdict, float | None],
    nvme: tuple[Verdict, float | None],
) -> tuple[Verdict, str]:
    """The worst of the GPU, host and disk verdicts, with one sentence naming what decides it."""
    if strategy.offload_optimizer == "nvme" or strategy.offload_param == "nvme":
        host_what = "for NVMe swap buffers and what stays in RAM"
    elif strategy.offload_optimizer == "cpu" or strategy.offload_param == "cpu":
        host_what = "for offloaded states"
    else:
        host_what = "to load the model"
    def share(need: int, have: int | None, fraction: float | None, unit: str) -> str:
        if have is None or fraction is None:
            return f"{_gib(need)} {unit}"
        return f"{need / GIB:.1f} of {_gib(have)} {unit} ({fraction:.0%})"

    parts = {
        "gpu": (gpu[0], "GPU: " + share(gpu_total, machine.gpu_mem_bytes, gpu[1], "per device")),
        "host": (host[0], "host RAM: " + share(cpu, machine.host_mem_bytes, host[1], "per node") + f" {host_what}"),
        "disk": (nvme[0], "NVMe: " + share(disk, machine.disk_free_bytes, nvme[1], "free per node")),
    }
    worst = max(parts.values(), key=lambda p: _RANK[p[0]])[0]
    if worst == "unknown":
        return "unknown", f"GPU memory unknown ({parts['gpu'][1]})"
    if worst == "fits":
        return "fits", parts["gpu"][1] + "; " + parts["host"][1]
    culprits = [text for verdict, text in parts.values() if verdict == worst]
    return worst, "; ".join(culprits)


def estimate_rows(
    shape: ModelShape,
    machine: Machine,
    workload: Workload | None = None,
    strategies: tuple[Strategy, ...] = STRATEGIES,
) -> list[EstimateRow]:
    """Every strategy's estimate for this model on this machine, in the advisor's order (fastest first)."""
    workload = workload or Workload()
    return [estimate_row(s, shape, machine, workload) for s in strategies]
