"""The machine an estimate is judged against: GPUs per node, nodes, GPU memory, host RAM, NVMe space.

Detection is best effort and never raises: GPU memory through NVML (pynvml, imported lazily; None when there is no
driver), host RAM through psutil, free disk through shutil. Given values always win over detected ones.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Machine:
    gpus_per_node: int = 1
    num_nodes: int = 1
    gpu_mem_bytes: int | None = None  # per device (the smallest of the node's GPUs when detected)
    host_mem_bytes: int | None = None  # per node
    disk_free_bytes: int | None = None  # free space where NVMe offload would write
    notes: tuple[str, ...] = field(default=())  # where each figure came from

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus_per_node": self.gpus_per_node,
            "num_nodes": self.num_nodes,
            "gpu_mem_bytes": self.gpu_mem_bytes,
            "host_mem_bytes": self.host_mem_bytes,
            "disk_free_bytes": self.disk_free_bytes,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    total_bytes: int
    free_bytes: int


def detect_gpus() -> list[GpuInfo] | None:
    """The node's NVIDIA GPUs via NVML (traindeck's one NVML wrapper), or None when NVML or a driver is missing.
    GPUs NVML cannot open (another job's, a lost one) are left out."""
    from traindeck.backend.monitor.nvml import NvmlLibrary

    library = NvmlLibrary()
    with library:
        if not library.is_open:
            return None
        gpus = []
        for i in range(library.device_count):
            memory, name = library.memory_free(i), library.name(i)
            if memory is not None:
                gpus.append(GpuInfo(i, name or "NVIDIA GPU", memory[1], memory[0]))
        return gpus


def host_memory() -> tuple[int, int] | None:
    """(total, available) host RAM in bytes, or None when psutil cannot tell."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)
    except Exception:  # noqa: BLE001 - the estimate is advice: it goes on without host figures
        logger.warning("host memory unreadable", exc_info=True)
        return None


def disk_free(path: str) -> int | None:
    try:
        return int(shutil.disk_usage(path).free)
    except OSError as exc:
        logger.info("free space of %s unreadable: %s", path, exc)
        return None


def describe_machine(
    gpus_per_node: int | None = None,
    num_nodes: int | None = None,
    gpu_mem_bytes: int | None = None,
    host_mem_bytes: int | None = None,
    nvme_path: str | None = None,
    disk_free_bytes: int | None = None,
    detect: bool = True,
) -> Machine:
    """A Machine from given values, filling the rest from this node (when detect) and saying which is which."""
    notes: list[str] = []
    gpus = detect_gpus() if detect and (gpus_per_node is None or gpu_mem_bytes is None) else None
    if gpus_per_node is None:
        if gpus:
            gpus_per_node = len(gpus)
            notes.append(f"{len(gpus)} GPU(s) detected")
        else:
            gpus_per_node = 1
            notes.append(
                "no NVIDIA GPU detected: assuming 1 GPU per node" if detect else "GPUs per node not given: assuming 1"
            )
    if gpu_mem_bytes is None:
        if gpus:
            gpu_mem_bytes = min(g.total_bytes for g in gpus)
            notes.append(f"GPU memory detected ({gpus[0].name})")
        else:
            notes.append("GPU memory unknown: give --gpu-mem GiB")
    if host_mem_bytes is None and detect:
        mem = host_memory()
        if mem:
            host_mem_bytes = mem[0]
            notes.append("host RAM detected")
    if disk_free_bytes is None and nvme_path:
        disk_free_bytes = disk_free(nvme_path)
        notes.append(f"free space at {nvme_path} " + ("detected" if disk_free_bytes is not None else "unknown"))
    return Machine(
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes or 1,
        gpu_mem_bytes=gpu_mem_bytes,
        host_mem_bytes=host_mem_bytes,
        disk_free_bytes=disk_free_bytes,
        notes=tuple(notes),
    )
