"""Before launch: what a preset's strategy needs for a model of a given size, against what is free right now.

    shape = read_model_size("1.5B")                     # or a model's config.json (counted in a child process)
    check = check_preset(preset, shape, nproc=2)      # detects free GPU memory (NVML) and available host RAM
    check.verdict, check.warnings                     # "fits" | "tight" | "does not fit" | "unknown"

A preset is read for its strategy (ZeRO stage and offload, or FSDP sharding, or plain data parallel) and for what
the estimate depends on (precision, optimizer, micro batch); what the preset cannot say (sequence length,
activation checkpointing in the script) is the Workload default and listed in `assumptions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.estimate.advisor import check_against_machine
from traindeck.backend.estimate.estimator import (
    STRATEGIES,
    TIGHT_FRACTION,
    EstimateRow,
    Offload,
    Strategy,
    Workload,
    estimate_row,
)
from traindeck.backend.estimate.machine import Machine, detect_gpus, disk_free, host_memory
from traindeck.backend.estimate.model_shape import ModelShape, count_model_config, shape_from_params
from traindeck.backend.estimate.model_states import OPTIMIZER_STATE_BYTES
from traindeck.backend.estimate.quantity import GIB, QuantityError, parse_count
from traindeck.backend.presets import Preset

_VERDICT_RANK = {"fits": 0, "tight": 1, "does not fit": 2}
# accelerate's FSDP1 sharding strategies (names and their numbers) -> the ZeRO stage with the same sharding.
_FSDP_STAGE = {"FULL_SHARD": 3, "1": 3, "SHARD_GRAD_OP": 2, "2": 2, "NO_SHARD": 0, "3": 0,
               "HYBRID_SHARD": 3, "4": 3, "HYBRID_SHARD_ZERO2": 2, "5": 2}


def read_model_size(text: str) -> ModelShape:
    """A parameter count ("1.5B", "350M", "7e9") or a model config (config.json, its folder, or a cached model
    id). Raises ValueError (QuantityError / ModelConfigError) with a one-line message for the user."""
    text = text.strip()
    if not text:
        raise QuantityError("model size: empty; write a parameter count like 1.5B or choose a config.json")
    try:
        return shape_from_params(parse_count(text, "model size"))
    except QuantityError:
        if text[0].isdigit() and "/" not in text and not text.endswith(".json"):
            raise  # "1.5Q": a mistyped count, not a model id
    return count_model_config(text)  # child process: torch is never imported here


def strategy_for_preset(preset: Preset) -> Strategy:
    """The estimator's strategy that this preset trains with (a row of STRATEGIES where one matches)."""
    accelerate = preset.accelerate or {}
    if preset.deepspeed is not None:
        zero = _mapping(preset.deepspeed.get("zero_optimization"))
        stage = _int(zero.get("stage"), 0)
        optimizer = _offload(zero.get("offload_optimizer")) if stage >= 1 else "none"
        param = _offload(zero.get("offload_param")) if stage == 3 else "none"
        if stage in (1, 2) and optimizer == "nvme":
            optimizer = "cpu"  # DeepSpeed offloads to NVMe at stage 3 only; below it the states stay in host RAM
        if stage == 0:
            return _find("ddp", 0, "none", "none")
        return _find("deepspeed", stage, optimizer, param)
    if str(accelerate.get("distributed_type", "")).upper() == "FSDP":
        fsdp = _mapping(accelerate.get("fsdp_config"))
        offload: Offload = "cpu" if fsdp.get("fsdp_offload_params") is True else "none"
        if _int(fsdp.get("fsdp_version"), 1) == 2:
            reshard = fsdp.get("fsdp_reshard_after_forward", True)
            stage = 2 if reshard is False or str(reshard).upper() == "SHARD_GRAD_OP" else 3
        else:
            # Under `accelerate launch`, FSDP1 takes its sharding from fsdp_sharding_strategy (default FULL_SHARD).
            stage = _FSDP_STAGE.get(str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).upper(), 3)
        if offload == "cpu":
            stage = 3  # the estimator's only FSDP offload row is FULL_SHARD + CPU offload
        return _find("fsdp", stage, offload, offload)
    return _find("ddp", 0, "none", "none")


def workload_for_preset(preset: Preset, base: Workload | None = None) -> Workload:
    """`base` (default Workload()) with the preset's precision, optimizer, micro batch, checkpointing and ZeRO
    reduce bucket (reduce_bucket_size, overlap_comm)."""
    return Workload(**{**(base or Workload()).to_dict(), **preset_workload(preset)})


def preset_workload(preset: Preset) -> dict[str, Any]:
    """The Workload fields this preset says, and only those: "precision" (DeepSpeed's bf16/fp16 sections, else
    accelerate's mixed_precision), "optimizer", "micro_batch" (train_micro_batch_size_per_gpu, else train_batch_size
    over gradient accumulation and the processes, as DeepSpeed derives it), "activation_checkpointing" (FSDP's),
    "zero_init", "reduce_bucket_size", "overlap_comm". "auto" (filled in by transformers) says nothing."""
    values: dict[str, Any] = {}
    ds = preset.deepspeed or {}
    accelerate = preset.accelerate or {}
    mixed = str(accelerate.get("mixed_precision", "")).lower()
    if _enabled(ds.get("bf16")) or _enabled(ds.get("bfloat16")):
        values["precision"] = "bf16"
    elif _enabled(ds.get("fp16")):
        values["precision"] = "fp16"
    elif mixed in ("bf16", "fp16"):
        values["precision"] = mixed
    elif ds or "mixed_precision" in accelerate:
        values["precision"] = "fp32"  # DeepSpeed without bf16/fp16, or mixed_precision "no": fp32 weights
    kind = str(_mapping(ds.get("optimizer")).get("type", "")).lower()
    if kind in OPTIMIZER_STATE_BYTES:
        values["optimizer"] = kind
    micro = _whole(ds.get("train_micro_batch_size_per_gpu"))
    total, steps = _whole(ds.get("train_batch_size")), _whole(ds.get("gradient_accumulation_steps")) or 1
    processes = _whole(accelerate.get("num_processes"))
    if micro is None and total is not None and processes is not None and total % (steps * processes) == 0:
        micro = total // (steps * processes)  # train_batch_size = micro batch x accumulation x processes
    if micro is not None:
        values["micro_batch"] = micro
    fsdp = _mapping(accelerate.get("fsdp_config"))
    if fsdp.get("fsdp_activation_checkpointing") is True:
        values["activation_checkpointing"] = True
    init = _mapping(accelerate.get("deepspeed_config")).get("zero3_init_flag")
    if isinstance(init, bool):
        values["zero_init"] = init
    zero = _mapping(ds.get("zero_optimization"))
    bucket = _whole(zero.get("reduce_bucket_size"))  # "auto" (transformers fills it in) keeps DeepSpeed's default
    if bucket is not None:
        values["reduce_bucket_size"] = bucket
    if isinstance(zero.get("overlap_comm"), bool):
        values["overlap_comm"] = zero["overlap_comm"]
    return values


def _whole(value: Any) -> int | None:
    """A positive whole number as a config holds it (8, 8.0), else None ("auto", True, 0)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class FreeMemory:
    """What is free right now: per GPU (None: no NVIDIA GPU or driver) and host RAM the kernel can hand out."""

    gpu_free_bytes: tuple[int, ...] | None
    gpu_total_bytes: tuple[int, ...] | None
    host_available_bytes: int | None
    host_total_bytes: int | None


def free_memory() -> FreeMemory:
    """One NVML reading of every GPU and one of host memory. May take a moment (NVML start): not on a UI thread."""
    gpus = detect_gpus()
    host = host_memory()
    return FreeMemory(
        gpu_free_bytes=tuple(g.free_bytes for g in gpus) if gpus else None,
        gpu_total_bytes=tuple(g.total_bytes for g in gpus) if gpus else None,
        host_available_bytes=host[1] if host else None,
        host_total_bytes=host[0] if host else None,
    )


@dataclass(frozen=True)
class LaunchMemoryCheck:
    row: EstimateRow
    shape: ModelShape
    workload: Workload
    free: FreeMemory
    gpu_free_bytes: int | None  # the smallest free figure among the GPUs the run uses
    verdict: str  # "fits" | "tight" | "does not fit" | "unknown" (nothing could be compared)
    warnings: list[str]  # check_against_machine's, each starting "GPU:", "host RAM:" or "NVMe:"
    gpu_verdict: str | None = None  # "fits" | "tight" | "does not fit"; None: not compared (no GPU found)
    host_verdict: str | None = None
    assumptions: tuple[str, ...] = field(default=())
    nvme_path: str | None = None  # where the preset offloads to NVMe (ZeRO-Infinity); None: no NVMe offload
    disk_free_bytes: int | None = None  # free space at nvme_path now; None: no NVMe offload or unreadable
    disk_verdict: str | None = None  # "fits" | "tight" | "does not fit"; None: not compared

    @property
    def does_not_fit(self) -> bool:
        return self.verdict == "does not fit"

    def verdict_of(self, warning: str) -> str | None:
        """The verdict of the resource a warning is about (None: that resource could not be compared)."""
        if warning.startswith("GPU:"):
            return self.gpu_verdict
        if warning.startswith("host RAM:"):
            return self.host_verdict
        return self.disk_verdict if warning.startswith("NVMe:") else None

    def lines(self) -> list[str]:
        """Need against free, one line each for GPU and host RAM."""
        row, free = self.row, self.free
        gpu_free = ("no NVIDIA GPU found: not checked" if self.gpu_free_bytes is None
                    else f"{self.gpu_free_bytes / GIB:.1f} GiB free")
        host = free.host_available_bytes
        host_free = "unknown: not checked" if host is None else f"{host / GIB:.1f} GiB available"
        out = [
            f"GPU: about {row.gpu_total_bytes_per_device / GIB:.1f} GiB per device ({gpu_free})",
            f"host RAM: about {row.cpu_bytes_per_node / GIB:.1f} GiB per node ({host_free})",
        ]
        if self.nvme_path is not None:
            disk_free = ("free space unknown: not checked" if self.disk_free_bytes is None
                         else f"{self.disk_free_bytes / GIB:.1f} GiB free at {self.nvme_path}")
            out.append(f"NVMe: about {row.disk_bytes_per_node / GIB:.1f} GiB per node ({disk_free})")
        return out


def check_preset(preset: Preset, shape: ModelShape, nproc: int | None = None, *, free: FreeMemory | None = None,
                 env: Mapping[str, str] | None = None, workload: Workload | None = None) -> LaunchMemoryCheck:
    """The preset's estimate row for `shape` on this node, compared with free GPU memory and available host RAM.

    `nproc`: ranks on this node (None: the preset's count). `free`: what is free (None: measured now). `env`: the
    run's environment; CUDA_VISIBLE_DEVICES there says which GPUs the ranks use.
    """
    ranks = nproc if nproc and nproc > 0 else preset.process_count()
    nodes = _int((preset.accelerate or {}).get("num_machines"), 1)
    free = free if free is not None else free_memory()
    workload = workload_for_preset(preset, workload)
    used = _used_gpus(free.gpu_free_bytes, ranks, env)
    gpu_free = min(used) if used else None
    strategy = strategy_for_preset(preset)
    # Judged against what is free now, not the totals: that is what the run will actually get.
    machine = Machine(gpus_per_node=ranks, num_nodes=max(1, nodes), gpu_mem_bytes=gpu_free,
                      host_mem_bytes=free.host_available_bytes)
    row = estimate_row(strategy, shape, machine, workload)
    # ZeRO-Infinity's swap files: the estimate's NVMe bytes against the free space at the config's nvme_path.
    nvme_path = _nvme_path(preset.deepspeed) if row.disk_bytes_per_node else None
    disk = disk_free(_existing(nvme_path)) if nvme_path else None
    warnings = check_against_machine(row, list(used) if used else None, free.host_available_bytes, disk)
    gpu_verdict = _judge(row.gpu_total_bytes_per_device, gpu_free)
    host_verdict = _judge(row.cpu_bytes_per_node, free.host_available_bytes)
    disk_verdict = _judge(row.disk_bytes_per_node, disk) if nvme_path else None
    verdicts = [v for v in (gpu_verdict, host_verdict, disk_verdict) if v is not None]
    verdict = max(verdicts, key=_VERDICT_RANK.__getitem__) if verdicts else "unknown"
    assumed = (f"activations for micro batch {workload.micro_batch} x {workload.seq_len} tokens "
               f"({workload.precision}, {workload.optimizer})",)
    return LaunchMemoryCheck(row=row, shape=shape, workload=workload, free=free, gpu_free_bytes=gpu_free,
                             verdict=verdict, warnings=warnings, gpu_verdict=gpu_verdict, host_verdict=host_verdict,
                             assumptions=assumed + shape.assumptions, nvme_path=nvme_path, disk_free_bytes=disk,
                             disk_verdict=disk_verdict)


# ---- helpers ----------------------------------------------------------------------------------------------------
def _find(framework: str, stage: int, optimizer: Offload, param: Offload) -> Strategy:
    for s in STRATEGIES:
        if (s.framework, s.zero_stage, s.offload_optimizer, s.offload_param) == (framework, stage, optimizer, param):
            return s
    # A combination the table has no row for (e.g. ZeRO-3 with only the parameters offloaded): same arithmetic.
    where = {"cpu": "CPU", "nvme": "NVMe"}
    parts = [f"ZeRO-{stage}"]
    if optimizer != "none":
        parts.append(f"optimizer offload ({where[optimizer]})")
    if param != "none":
        parts.append(f"param offload ({where[param]})")
    name = f"zero{stage}" + (f"+opt-{optimizer}" if optimizer != "none" else "") + \
        (f"+param-{param}" if param != "none" else "")
    return Strategy(name, " + ".join(parts), "deepspeed", stage, optimizer, param)


def _used_gpus(free: Sequence[int] | None, ranks: int, env: Mapping[str, str] | None) -> list[int]:
    if not free:
        return []
    visible = (env or {}).get("CUDA_VISIBLE_DEVICES")
    indices = list(range(len(free)))
    if visible is not None:
        picked = [int(p) for p in visible.split(",") if p.strip().isdigit()]
        if picked or not visible.strip():
            indices = [i for i in picked if i < len(free)]
    return [free[i] for i in indices[:max(1, ranks)]]


def _judge(need: int, have: int | None) -> str | None:
    if have is None:
        return None
    if need > have:
        return "does not fit"
    return "tight" if need > TIGHT_FRACTION * have else "fits"


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return default


def _offload(section: Any) -> Offload:
    device = str(_mapping(section).get("device", "none")).lower()
    if device == "cpu":
        return "cpu"
    return "nvme" if device == "nvme" else "none"


def _enabled(section: Any) -> bool:
    return _mapping(section).get("enabled") is True


def _nvme_path(deepspeed: Any) -> str | None:
    """The first nvme_path of the config's NVMe offload sections (parameters, then optimizer)."""
    zero = _mapping(_mapping(deepspeed).get("zero_optimization"))
    for name in ("offload_param", "offload_optimizer"):
        section = _mapping(zero.get(name))
        path = section.get("nvme_path")
        if _offload(section) == "nvme" and isinstance(path, str) and path:
            return path
    return None


def _existing(path: str) -> str:
    """`path`, or its nearest existing parent (DeepSpeed creates the folder): where the free space is."""
    here = Path(path)
    while not here.exists() and here != here.parent:
        here = here.parent
    return str(here)
