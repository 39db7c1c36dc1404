"""The demo runs' resource samples: what the supervisor's recorder would have written while each demo run ran, so
the Runs page's System view and the Monitor's Run tab chart them as they chart a real run.

A `ResourceStory` says what the run was like (its GPUs, how much GPU and host memory its ranks held, how long it
started up, when it wrote checkpoints, when its ranks ended); `write_samples` turns it into `ResourceSample`s, the
frozen snapshots the samplers return, and writes them with the recorder's own writer (ResourceWriter), in one
transaction. The story over time: during start-up the ranks load the model (host memory and GPU memory climb, the
GPUs idle), then every GPU computes (~90 % busy, memory breathing with each step); a checkpoint dips the GPUs and
writes to disk for a few seconds; a rank that ended leaves the process list and its GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.snapshots import (
    GpuProcess,
    GpuSnapshot,
    HostSnapshot,
    ResourceSample,
    RunProcess,
    RunSnapshot,
)

GIB = 1024**3
MIB = 1024**2
GPU_NAME = "NVIDIA RTX A5000"  # the Monitor's demo has the same cards (backend/monitor/demo.py)
GPU_TOTAL = 24564 * MIB
RAM_TOTAL = 64 * GIB
CORES = 16
CHECKPOINT_S = 4.0  # how long a checkpoint holds the GPUs and writes to disk


@dataclass(frozen=True)
class ResourceStory:
    """What a demo run's resources were like while it ran."""

    gpus: int
    gpu_mem_gib: float  # the peak GPU memory of each rank, once training
    rank_rss_gib: float  # the peak host memory (RSS) of each rank
    startup_s: float  # from the launch to the first step: memory climbs, the GPUs idle
    util: float = 92.0  # GPU utilisation while training
    root_pid: int = 5000  # the launcher's
    rank_pids: tuple[int, ...] = ()  # each rank's (default: the launcher's + 1 + rank)
    script: str = "train.py"
    checkpoints: tuple[float, ...] = ()  # seconds after the start a checkpoint began
    rank_ends: Mapping[int, float] = field(default_factory=dict)  # rank -> seconds after the start it ended
    gpu_mem_end_gib: Mapping[int, float] = field(default_factory=dict)  # a rank's GPU memory as it ended


def _sample(story: ResourceStory, t: float, since: float) -> ResourceSample:
    """A one-second look at the run `since` seconds after its start."""
    rise = min(1.0, since / story.startup_s) if story.startup_s > 0 else 1.0
    training = since >= story.startup_s
    wave = 0.5 + 0.5 * math.sin(since / 3.0)
    saving = any(0 <= since - c < CHECKPOINT_S for c in story.checkpoints)
    util = (story.util - 4 * wave if training else 8.0 * rise) * (0.2 if saving else 1.0)
    alive = [r for r in range(story.gpus) if since < story.rank_ends.get(r, math.inf)]
    gpus, processes = [], []
    for rank in range(story.gpus):
        pid = story.rank_pids[rank] if rank < len(story.rank_pids) else story.root_pid + 1 + rank
        end = story.rank_ends.get(rank)
        peak = story.gpu_mem_gib
        if end is not None and rank in story.gpu_mem_end_gib:  # climbing to what it held in its last second
            climbed = (since - story.startup_s) / max(1.0, end - 1.0 - story.startup_s)
            peak += (story.gpu_mem_end_gib[rank] - peak) * min(1.0, max(0.0, climbed))
        breath = 1.0 if rank in story.gpu_mem_end_gib else 0.97 + 0.03 * wave  # a climb does not breathe
        used = int(peak * GIB * (0.35 + 0.65 * rise) * breath) if rank in alive else 0
        own = (GpuProcess(pid, rank, max(0, used - 450 * MIB), "compute"),) if rank in alive else ()
        busy = util + 1.5 * rank if rank in alive else 0.0
        gpus.append(GpuSnapshot(
            t=t, index=rank, name=GPU_NAME, uuid=f"GPU-demo000{rank}-0000-0000-0000-000000000000",
            utilization_percent=round(busy), memory_used_bytes=used or 310 * MIB, memory_total_bytes=GPU_TOTAL,
            power_w=round(60 + 1.7 * busy, 1), power_limit_w=230.0, temperature_c=round(38 + 0.35 * busy),
            sm_clock_mhz=1950 if busy > 20 else 1200, pcie_h2d_bytes_per_s=(0.2 + 0.6 * wave) * GIB * (busy / 100),
            pcie_d2h_bytes_per_s=(0.1 + 0.4 * wave) * GIB * (busy / 100), pcie_t=t - 0.4, processes=own))
        if rank in alive:
            rss = int(story.rank_rss_gib * GIB * (0.15 + 0.85 * rise) * (0.98 + 0.02 * wave))
            cpu = 180.0 if saving else (104.0 + 6 * wave if training else 100.0)
            processes.append(RunProcess(pid, story.root_pid, "python", f"python {story.script} --local_rank={rank}",
                                        "rank", rank, rank, cpu, rss, 0, int(0.3 * GIB * rise),
                                        int((2.0 if saving else 0.1) * GIB), max(0, used - 450 * MIB)))
    launcher = RunProcess(story.root_pid, story.root_pid - 10, "accelerate", f"accelerate launch {story.script}",
                          "launcher", None, None, 0.4, 290 * MIB, 0, 0, 0)
    ranks_rss = sum(p.rss_bytes or 0 for p in processes)
    ram_used = int(ranks_rss + 6.5 * GIB)
    cores = tuple(min(100.0, (len(alive) * (150.0 if saving else 105.0) + 60.0 * (1 - rise)) / CORES
                      + 9.0 + 4 * math.sin(since / 7.0 + core)) for core in range(CORES))
    host = HostSnapshot(
        t=t, cpu_percent=sum(cores) / CORES, per_core_percent=cores, ram_total_bytes=RAM_TOTAL,
        ram_used_bytes=ram_used, ram_available_bytes=RAM_TOTAL - ram_used, swap_total_bytes=8 * GIB,
        swap_used_bytes=int(0.2 * GIB), disk_read_bytes_per_s=(350 * MIB * (1 - rise) if not training else 2 * MIB),
        disk_write_bytes_per_s=(900 * MIB if saving else 1.5 * MIB + MIB * wave), disks=(),
        net_rx_bytes_per_s=30e3 + 20e3 * wave, net_tx_bytes_per_s=10e3 + 5e3 * wave)
    run = RunSnapshot(t=t, root_pid=story.root_pid, processes=(launcher, *processes) if alive else ())
    return ResourceSample(t=t, host=host, gpus=tuple(gpus), gpu_error=None, run=run)


def write_samples(store_path: Path | str, run_id: str, story: ResourceStory, started: float, ended: float,
                  count: int | None = None) -> int:
    """Write the run's samples from `started` to `ended` (one a second, or `count` evenly spread for a long run)
    into the run store at `store_path`, as the recorder writes them; how many were written."""
    span = max(0.0, ended - started)
    count = max(1, int(span) if count is None else count)
    interval = span / count if span else 1.0
    writer = ResourceWriter(store_path, run_id, interval_s=max(1.0, interval), started_at=started)
    try:
        for i in range(count):
            since = (i + 1) * interval
            writer.write(_sample(story, started + since, since), commit=False)
        writer.commit()
    finally:
        writer.close()
    return count
