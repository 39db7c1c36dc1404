"""Recorded-looking resource samples for screenshots and demos: a ZeRO-2 run with optimizer offload to CPU (and
an NVMe swap folder) on two 24 GiB GPUs, built as the same frozen snapshots the samplers return (GPUs shaped like
NVML's readings), so everything downstream (charts, the store, the offload view) runs its real code on them.

The story it tells, step after step (about 8 s each after a minute of start-up): the GPUs compute forward and
backward (utilisation ~95 %), gradients stream to the host (PCIe device->host), the CPU runs Adam on every core
while the GPUs idle, NVMe is read and written for the swapped optimizer state, and the updated parameters go
back (host->device). Host RSS of the ranks climbs while the optimizer state is allocated, then stays flat.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from traindeck.backend.monitor.gpu_processes import gpu_use_by_pid
from traindeck.backend.monitor.snapshots import (
    DiskRate,
    GpuHealth,
    GpuProcess,
    GpuSnapshot,
    HostSnapshot,
    MachineProcess,
    MachineSnapshot,
    ResourceSample,
    RunProcess,
    RunSnapshot,
)

GIB = 1024**3
MIB = 1024**2
GPU_NAME = "NVIDIA RTX A5000"
GPU_TOTAL = 24564 * MIB
RAM_TOTAL = 64 * GIB
SWAP_TOTAL = 8 * GIB
CORES = 16
STEP_S = 8.0
WARMUP_S = 60.0
NVME_PATH = "/mnt/nvme/offload"
ROOT_PID, RANK_PIDS = 41000, (41012, 41013)


def _phase(t: float) -> tuple[str, float]:
    """The training phase at t seconds after the start, and how far into it (0-1)."""
    if t < WARMUP_S:
        return "startup", t / WARMUP_S
    into = (t - WARMUP_S) % STEP_S
    # Whole seconds, so that 1 Hz samples see every phase: 4 s compute, 1 s gradients out, 2 s Adam, 1 s back.
    for name, start, end in (("compute", 0.0, 4.0), ("d2h", 4.0, 5.0), ("adam", 5.0, 7.0), ("h2d", 7.0, STEP_S)):
        if into < end:
            return name, (into - start) / (end - start)
    return "h2d", 1.0


def demo_samples(seconds: int = 900, end: float | None = None, gpus: int = 2, seed: int = 7) -> list[ResourceSample]:
    """`seconds` samples at 1 Hz ending at `end` (default now)."""
    rng = np.random.default_rng(seed)
    end = time.time() if end is None else end
    t0 = end - seconds
    samples = []
    temperature = [38.0 + i for i in range(gpus)]
    for k in range(seconds):
        since = float(k)
        t = t0 + k + 1
        phase, into = _phase(since)
        noise = lambda scale: float(rng.normal(0, scale))  # noqa: E731
        ramp = min(1.0, since / WARMUP_S)

        util = {"startup": 10 * ramp, "compute": 96.0, "d2h": 40.0, "adam": 3.0, "h2d": 30.0}[phase]
        # fp16 gradients out and parameters back, ~1.5 GiB each way per step and GPU (a 774M-parameter model).
        h2d = {"h2d": 1.45 * GIB, "compute": 0.03 * GIB}.get(phase, 0.01 * GIB)
        d2h = {"d2h": 1.5 * GIB, "compute": 0.02 * GIB}.get(phase, 0.01 * GIB)
        gpu_mem = (1.2 + 17.5 * ramp) * GIB + (0.8 * GIB * math.sin(math.pi * into) if phase == "compute" else 0)
        busy = {"startup": 25.0 * (1 - ramp) + 15, "compute": 14.0, "d2h": 22.0, "adam": 93.0, "h2d": 20.0}[phase]
        nvme_r = {"adam": 1.6 * GIB, "d2h": 0.5 * GIB}.get(phase, 0.0)
        nvme_w = {"adam": 1.2 * GIB, "h2d": 0.6 * GIB}.get(phase, 0.0)
        rank_rss = (2.2 + 15.8 * ramp) * GIB + (0.6 * GIB if phase == "adam" else 0.0)

        gpu_list = []
        for i in range(gpus):
            u = max(0.0, min(100.0, util + noise(2.5)))
            power = 68 + 1.6 * u + noise(4)
            temperature[i] += (36 + 0.38 * u - temperature[i]) * 0.03
            procs = (GpuProcess(RANK_PIDS[i % len(RANK_PIDS)], i, int(gpu_mem - 0.45 * GIB), "compute",
                                sm_percent=round(0.96 * u)),)
            gpu_list.append(GpuSnapshot(
                t=t, index=i, name=GPU_NAME, uuid=f"GPU-demo000{i}-0000-0000-0000-000000000000",
                utilization_percent=round(u), memory_used_bytes=int(gpu_mem + i * 0.3 * GIB + noise(0.05 * GIB)),
                memory_total_bytes=GPU_TOTAL, power_w=round(min(power, 229.0), 2), power_limit_w=230.0,
                temperature_c=round(temperature[i]), sm_clock_mhz=1950 if u > 20 else 1200,
                pcie_h2d_bytes_per_s=max(0.0, h2d * (1 + noise(0.08))), pcie_d2h_bytes_per_s=max(0.0, d2h * (1 + noise(0.08))),
                pcie_t=t - 0.4, processes=procs,
                # The second card sits in a slot that trained its link down to x8: said while it is busy.
                health=GpuHealth(throttle=("gpu_idle",) if u < 20 else (), throttle_known=True,
                                 pcie={"gen": 4 if u > 20 else 1, "max_gen": 4, "width": 16 if i == 0 else 8,
                                       "max_width": 16},
                                 pcie_replays=0, ecc={"enabled": False, "volatile_corrected": None,
                                                      "volatile_uncorrected": None, "remapped_rows": None}),
            ))

        cores = tuple(float(np.clip(busy + rng.normal(0, 6 if phase == "adam" else 9), 0, 100)) for _ in range(CORES))
        ranks_total = rank_rss * len(RANK_PIDS)
        other_used = 7.5 * GIB + noise(0.1 * GIB)
        used = int(min(RAM_TOTAL - GIB, ranks_total + other_used))
        disk_r = nvme_r + max(0.0, noise(2 * MIB))
        disk_w = nvme_w + max(0.0, 1.5 * MIB + noise(1 * MIB))
        host = HostSnapshot(
            t=t, cpu_percent=float(np.mean(cores)), per_core_percent=cores, ram_total_bytes=RAM_TOTAL,
            ram_used_bytes=used, ram_available_bytes=RAM_TOTAL - used, swap_total_bytes=SWAP_TOTAL,
            swap_used_bytes=int(0.25 * GIB + 0.1 * GIB * ramp), disk_read_bytes_per_s=disk_r,
            disk_write_bytes_per_s=disk_w,
            disks=(DiskRate("nvme0n1", disk_r, disk_w), DiskRate("sda", 0.0, max(0.0, 2 * MIB + noise(MIB)))),
            net_rx_bytes_per_s=max(0.0, 40e3 + noise(15e3)), net_tx_bytes_per_s=max(0.0, 12e3 + noise(5e3)),
            watched_devices=((NVME_PATH, "nvme0n1"),),
        )

        adam_cpu = 700.0 if phase == "adam" else 100.0
        processes = [RunProcess(ROOT_PID, 40990, "accelerate", "accelerate launch --config_file ds_zero2_offload.yaml "
                                "train.py", "launcher", None, None, 0.3, int(180 * MIB), 0, 0, 0)]
        for rank, pid in enumerate(RANK_PIDS):
            processes.append(RunProcess(
                pid, ROOT_PID, "python", "python train.py --model_name_or_path gpt2-large", "rank", rank, rank,
                max(0.0, adam_cpu + noise(25)), int(rank_rss + rank * 0.2 * GIB + noise(0.02 * GIB)),
                int(2 * GIB * ramp), int(0.4 * GIB * since / 10), int(0.3 * GIB * since / 10),
                int(gpu_mem - 0.45 * GIB),
            ))
        run = RunSnapshot(t=t, root_pid=ROOT_PID, processes=tuple(processes))
        samples.append(ResourceSample(t=t, host=host, gpus=tuple(gpu_list), gpu_error=None, run=run))
    return samples


def demo_machine(sample: ResourceSample, run_id: str = "demo") -> MachineSnapshot:
    """The machine's processes at `sample`: the run's (marked with `run_id`, their GPU memory from the GPUs' lists)
    among what else a workstation runs."""
    by_pid = {p.pid: p.used_memory_bytes or 0 for g in sample.gpus for p in g.processes}
    use = gpu_use_by_pid(sample.gpus)
    processes = [MachineProcess(p.pid, p.ppid or 1, "ann", p.name, p.cmdline, p.cpu_percent, p.rss_bytes,
                                by_pid.get(p.pid), run_id, gpu_indices=use.get(p.pid, ((), None))[0],
                                gpu_sm_percent=use.get(p.pid, ((), None))[1], started_at=sample.t - 2 * 3600)
                 for p in (sample.run.processes if sample.run else ())]
    others = (("ann", "firefox", 6.5, 1.9 * GIB), ("ann", "code", 3.1, 1.1 * GIB), ("ann", "Xorg", 1.8, 0.3 * GIB),
              ("root", "dockerd", 0.4, 0.1 * GIB), ("ann", "jupyter-lab", 0.2, 0.4 * GIB),
              ("root", "systemd", 0.0, 0.01 * GIB), ("ann", "bash", 0.0, 0.005 * GIB),
              ("postgres", "postgres: writer", 0.1, 0.05 * GIB), ("ann", "tmux", 0.0, 0.01 * GIB))
    for index, (user, command, cpu, rss) in enumerate(others):
        processes.append(MachineProcess(2100 + 37 * index, 1, user, command.split(":")[0], command, cpu, int(rss),
                                        None, None, started_at=sample.t - 86400 - 977 * index))
    return MachineSnapshot(t=sample.t, processes=tuple(processes), cpu_count=len(sample.host.per_core_percent),
                           gpu_memory_known=bool(sample.gpus), took_s=0.004)


def demo_steps(samples: list[ResourceSample]) -> list[tuple[float, int]]:
    """[(t, step)]: one step logged at the end of each step of the demo's schedule."""
    if not samples:
        return []
    t0 = samples[0].t - 1
    steps = []
    step, t = 1, t0 + WARMUP_S + STEP_S
    while t <= samples[-1].t:
        steps.append((t, step))
        step += 1
        t += STEP_S
    return steps


def demo_offload_view(samples: list[ResourceSample], max_points: int = 2000) -> dict[str, Any]:
    """The offload view of the demo samples, through the real store and `offload_view` (in a temporary store)."""
    from traindeck.backend.monitor.offload import offload_view
    from traindeck.backend.monitor.sample_store import ResourceWriter

    steps = demo_steps(samples)
    with tempfile.TemporaryDirectory(prefix="traindeck-demo-") as folder:
        path = Path(folder) / "demo.sqlite"
        writer = ResourceWriter(path, "demo", interval_s=1.0, started_at=samples[0].t if samples else time.time())
        try:
            for sample in samples:
                writer.write(sample, commit=False)
            writer.commit()
        finally:
            writer.close()
        view = offload_view(path, "demo", steps, max_points=max_points)
    view["step_times"] = steps
    return view
