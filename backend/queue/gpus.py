"""Which GPUs a run asks for (`--gpus 0,2` or `--gpus any:2`) and which are free now.

A GPU is free when NVML lists no process on it and its used memory is under a threshold (the driver and a
display keep a little). On a MIG-enabled GPU the device-wide process list may not show processes inside MIG
instances (the recorded A100 lists none): such a GPU is judged by its used memory alone, which is not checked
against a busy MIG recording here. `free_gpus` decides from GPU snapshots only, so it is tested with recorded values;
`sample_gpus` is the one place that asks NVML (through the monitor's public sampler).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindeck.backend.monitor.snapshots import GpuSnapshot

if TYPE_CHECKING:
    from traindeck.backend.monitor.nvml import NvmlLibrary

FREE_MEMORY_THRESHOLD_BYTES = 512 * 2**20
# Drivers older than R510 count the driver's reservation as used (921 MiB on an idle A100 80GB): the threshold
# grows with the card so that an idle big card still reads as free.
FREE_MEMORY_FRACTION = 0.02


def _threshold(gpu: GpuSnapshot, threshold_bytes: int) -> float:
    return max(threshold_bytes, FREE_MEMORY_FRACTION * (gpu.memory_total_bytes or 0))


@dataclass(frozen=True)
class GpuRequest:
    """Chosen GPUs (`ids`) or any `count` free ones."""

    ids: tuple[int, ...] = ()
    count: int = 0

    @property
    def text(self) -> str:
        return ",".join(map(str, self.ids)) if self.ids else f"any:{self.count}"


def parse_gpus(text: str) -> GpuRequest:
    """`0,2` -> GpuRequest(ids=(0, 2)); `any:2` -> GpuRequest(count=2). Raises ValueError with a clear line."""
    value = text.strip()
    if value.lower().startswith("any:"):
        count = value[4:].strip()
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--gpus {text}: after 'any:' give how many GPUs (any:2)")
        return GpuRequest(count=int(count))
    parts = [p.strip() for p in value.split(",")]
    if not value or not all(p.isdigit() for p in parts):
        raise ValueError(f"--gpus {text}: give GPU indexes (0,2) or how many free ones (any:2)")
    ids = tuple(int(p) for p in parts)
    if len(set(ids)) != len(ids):
        raise ValueError(f"--gpus {text}: a GPU is named twice")
    return GpuRequest(ids=ids)


def gpu_is_free(gpu: GpuSnapshot, threshold_bytes: int = FREE_MEMORY_THRESHOLD_BYTES) -> bool:
    # Memory NVML cannot read (None) is not taken as free: we would start a run on a card we know nothing about.
    return (gpu.error is None and gpu.processes_unknown is None and not gpu.processes
            and gpu.memory_used_bytes is not None and gpu.memory_used_bytes < _threshold(gpu, threshold_bytes))


def busy_reason(gpu: GpuSnapshot, threshold_bytes: int = FREE_MEMORY_THRESHOLD_BYTES) -> str:
    if gpu.error is not None:
        return f"GPU {gpu.index} cannot be read ({gpu.error})"
    if gpu.processes:
        pids = ", ".join(str(p.pid) for p in gpu.processes[:3])
        return f"GPU {gpu.index} busy ({len(gpu.processes)} process(es): {pids})"
    if gpu.processes_unknown is not None:  # a process we cannot see may be on it
        return f"GPU {gpu.index}: its processes are not known ({gpu.processes_unknown})"
    if gpu.memory_used_bytes is None:
        return f"GPU {gpu.index}: used memory unknown"
    if gpu.memory_used_bytes >= _threshold(gpu, threshold_bytes):
        return f"GPU {gpu.index} busy ({gpu.memory_used_bytes / 2**20:.0f} MiB used)"
    return f"GPU {gpu.index} free"


def free_gpus(gpus: Iterable[GpuSnapshot], reserved: Iterable[int] = (),
              threshold_bytes: int = FREE_MEMORY_THRESHOLD_BYTES) -> list[int]:
    """Indexes of free GPUs, leaving out `reserved` (given to runs that started but may not hold memory yet)."""
    taken = set(reserved)
    return [g.index for g in gpus if g.index not in taken and gpu_is_free(g, threshold_bytes)]


@dataclass(frozen=True)
class GpuChoice:
    gpus: list[int] | None  # None: cannot start now (see waiting_for)
    waiting_for: str


def choose_gpus(request: GpuRequest | None, gpus: Sequence[GpuSnapshot], reserved: Iterable[int] = (),
                threshold_bytes: int = FREE_MEMORY_THRESHOLD_BYTES) -> GpuChoice:
    """The GPUs to start a run on now, or what it waits for. A run that names no GPUs on a GPU machine would use
    every visible GPU (accelerate and DeepSpeed default to all), so it waits until all of them are free."""
    reserved = set(reserved)
    free = free_gpus(gpus, reserved, threshold_bytes)
    by_index = {g.index: g for g in gpus}

    def reason(index: int) -> str:
        if index in reserved:
            return f"GPU {index} given to a queued run that started"
        gpu = by_index.get(index)
        return busy_reason(gpu, threshold_bytes) if gpu is not None else f"GPU {index} does not exist"

    if request is None:
        if not gpus:
            return GpuChoice([], "")
        busy = [g.index for g in gpus if g.index not in free]
        return GpuChoice(None, "all GPUs: " + "; ".join(reason(i) for i in busy)) if busy else GpuChoice([], "")
    if request.ids:
        busy = [i for i in request.ids if i not in free]
        if busy:
            return GpuChoice(None, "; ".join(reason(i) for i in busy))
        return GpuChoice(list(request.ids), "")
    if len(free) >= request.count:
        return GpuChoice(free[: request.count], "")
    wanted = f"{request.count} free GPU{'s' if request.count != 1 else ''}"  # "1 free GPUs" read as a slip
    return GpuChoice(None, f"{wanted} ({len(free)} free of {len(gpus)})")


def gpus_for_launch_now(text: str, gpus: Sequence[GpuSnapshot]) -> tuple[int, ...]:
    """`run --gpus` and the Launch page's Launch: chosen GPUs as they are; `any:N` picks N free ones now. Raises
    ValueError saying what it would wait for (then the run belongs in the queue)."""
    request = parse_gpus(text)
    if request.ids:
        return request.ids
    choice = choose_gpus(request, gpus)
    if choice.gpus is None:
        raise ValueError(f"--gpus {text}: waiting for {choice.waiting_for}; queue the run to wait for them")
    return tuple(choice.gpus)


def sample_gpus(library: NvmlLibrary | None = None) -> tuple[GpuSnapshot, ...]:
    """Every GPU now, through the monitor's sampler (`library`: a stand-in NVML in tests); none where there is
    no NVIDIA driver."""
    from traindeck.backend.monitor.gpu_sampler import GpuSampler

    sampler = GpuSampler(library)
    try:
        return sampler.sample().gpus
    finally:
        sampler.stop()
