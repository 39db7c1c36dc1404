"""The ZeRO-Offload story of a run, from its recorded samples: what moves where, and what each step costs.

With optimizer (and parameter) offload, host RAM holds what the GPU no longer does, PCIe carries it back and
forth every step, NVMe takes over with ZeRO-Infinity, and the GPU waits while the CPU runs the Adam step. The
series here are aligned on one time axis so a chart can stack them; per-step figures turn rates into bytes moved
per training step, given step timestamps from the log parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traindeck.backend.monitor.store_read import read_series

# Series name in the view -> column in the stored samples.
_SERIES = {
    "ranks_host_bytes": "ranks_rss",
    "host_used_bytes": "ram_used",
    "host_available_bytes": "ram_available",
    "swap_used_bytes": "swap_used",
    "ranks_locked_bytes": "ranks_locked",
    "ranks_cpu_pct": "ranks_cpu_pct",
    "pcie_h2d_bps": "pcie_h2d_bps",
    "pcie_d2h_bps": "pcie_d2h_bps",
    "nvme_read_bps": "nvme_read_bps",
    "nvme_write_bps": "nvme_write_bps",
    "disk_read_bps": "disk_read_bps",
    "disk_write_bps": "disk_write_bps",
    "gpu_mem_used_bytes": "gpu_mem_used",
    "gpu_util_pct": "gpu_util_pct",
}
# Rates integrated into bytes per step (name in the per-step figures -> stored column).
_MOVED = {
    "pcie_h2d_bytes": "pcie_h2d_bps",
    "pcie_d2h_bytes": "pcie_d2h_bps",
    "nvme_read_bytes": "nvme_read_bps",
    "nvme_write_bytes": "nvme_write_bps",
    "disk_read_bytes": "disk_read_bps",
    "disk_write_bytes": "disk_write_bps",
}
# A step shorter than the sampling interval (1 s) has no sample inside it: its RSS and GPU utilisation are those of
# the sample nearest its end, when one is this close (RSS and utilisation change over seconds, not within a step).
NEAREST_SAMPLE_S = 1.5


def offload_view(
    store_path: Path | str,
    run_id: str,
    steps: Sequence[tuple[float, int]] | None = None,
    *,
    max_points: int | None = None,
) -> dict[str, Any]:
    """Aligned series (numpy arrays on one "t" axis, NaN where unknown) and, with `steps`, per-step figures.

    Series: the ranks' host memory against used and available RAM (and swap, and locked/pinned memory), PCIe
    host->device and device->host, NVMe (the devices holding the watched offload paths) and all-disk I/O, GPU
    memory (sum over GPUs) and mean GPU utilisation, the ranks' CPU %. Fixed facts: "ram_total_bytes",
    "gpu_mem_total_bytes", "nvme_devices" ([path, device] pairs).

    `steps` is [(t, step), ...] as logged (every step or every Nth). For each pair of consecutive entries the
    figures cover the steps between them: "seconds_per_step", and per step the bytes moved over PCIe each way,
    NVMe and disk read/write ("*_bytes_per_step", None where the samples do not cover that stretch), with the
    peak ranks' host memory and mean GPU utilisation in it. Bytes are the rates integrated over time, each rate
    standing for the interval that ends at its sample: exact for PCIe where the GPU keeps byte counters
    ("pcie_source": "counter"), an estimate where NVML only samples ("pcie_per_step_is_estimate").
    """
    raw = read_series(store_path, run_id)
    shown = raw if max_points is None else read_series(store_path, run_id, max_points=max_points)
    info = raw["info"]
    view: dict[str, Any] = {"t": shown["t"]}
    for name, column in _SERIES.items():
        view[name] = shown[column]
    view["ram_total_bytes"] = info.get("ram_total_bytes")
    totals = [g.get("memory_total_bytes") for g in info.get("gpus", ())]
    view["gpu_mem_total_bytes"] = sum(totals) if totals and None not in totals else None
    view["nvme_devices"] = info.get("watched_devices", [])
    view["gpu_error"] = info.get("gpu_error")
    # PCIe bytes per step are exact only from NVML's cumulative counters; a sampled 20 ms window stands for the
    # whole interval, so those figures are an estimate and say so.
    view["pcie_source"] = info.get("pcie_source")
    view["pcie_per_step_is_estimate"] = info.get("pcie_source") != "counter"
    view["steps"] = _per_step(raw, steps) if steps else []
    return view


def _per_step(raw: dict[str, Any], steps: Sequence[tuple[float, int]]) -> list[dict[str, Any]]:
    import numpy as np

    t = raw["t"]
    ordered = sorted((float(ts), int(step)) for ts, step in steps)
    if t.size == 0:
        cumulative: dict[str, Any] = {}
    else:
        dt = np.diff(t, prepend=t[0])
        cumulative = {}
        for name, column in _MOVED.items():
            rates = raw[column]
            if np.all(np.isnan(rates)):
                continue  # never measured (no GPU, no watched NVMe path): no figure rather than a false zero
            cumulative[name] = np.cumsum(np.nan_to_num(rates) * dt)

    def moved(name: str, a: float, b: float) -> float | None:
        if name not in cumulative or b <= t[0] or a >= t[-1]:
            return None
        return float(np.interp(b, t, cumulative[name]) - np.interp(a, t, cumulative[name]))

    figures = []
    for (t0, s0), (t1, s1) in zip(ordered, ordered[1:], strict=False):
        count = s1 - s0
        if count <= 0 or t1 <= t0:
            continue
        inside = (t > t0) & (t <= t1) if t.size else np.zeros(0, dtype=bool)
        if t.size and not inside.any():  # a step shorter than the sampling: the sample nearest its end, if close
            nearest = int(np.argmin(np.abs(t - t1)))
            if abs(float(t[nearest]) - t1) <= NEAREST_SAMPLE_S:
                inside[nearest] = True
        entry: dict[str, Any] = {"step": s1, "t": t1, "steps": count, "seconds_per_step": (t1 - t0) / count}
        for name in _MOVED:
            total = moved(name, t0, t1)
            entry[f"{name}_per_step"] = None if total is None else total / count
        rss = raw["ranks_rss"][inside]
        util = raw["gpu_util_pct"][inside]
        entry["peak_ranks_host_bytes"] = float(np.nanmax(rss)) if rss.size and not np.all(np.isnan(rss)) else None
        entry["mean_gpu_util_pct"] = float(np.nanmean(util)) if util.size and not np.all(np.isnan(util)) else None
        figures.append(entry)
    return figures
