"""The Runs page's System view without widgets: the run's recorded resource samples as its charts draw them
(SYSTEM_CHARTS: each GPU's utilisation and memory, the host's CPU, the ranks' RSS, disk and network), with the words
for what is absent, and their export rows.

Numpy only (no Qt), so the page and tests use the same figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from traindeck.backend.runs.control.metric_charts import MetricTable
from traindeck.backend.runs.record.run_store import RunStore

# ---- the run's system series ----------------------------------------------------------------------------------
SYSTEM_POINTS = 2_000  # a first read of a run's samples: at most this many time buckets (peaks kept) a line
_AFTER = 1e-3  # a later read asks for samples this much after the newest one held (never the same one twice)


@dataclass(frozen=True)
class SystemChart:
    key: str
    title: str
    unit: str  # chart_axis's units: "%" or bytes ("B", "B/s"), written as people read them


SYSTEM_CHARTS: tuple[SystemChart, ...] = (
    SystemChart("gpu_util", "GPU utilisation", "%"),
    SystemChart("gpu_memory", "GPU memory", "B"),
    SystemChart("cpu", "Host CPU (all cores)", "%"),  # as the Monitor names it: 100 % = every core busy
    SystemChart("rank_rss", "Ranks' host memory (RSS)", "B"),
    SystemChart("disk", "Disk I/O", "B/s"),
    SystemChart("network", "Network", "B/s"),
)
# (chart, line, column of read_series) of the host's figures; each GPU's and each rank's lines are added by name.
_HOST_LINES = (("cpu", "host", "cpu_pct"), ("rank_rss", "all ranks", "ranks_rss"),
               ("disk", "read", "disk_read_bps"), ("disk", "written", "disk_write_bps"),
               ("network", "received", "net_rx_bps"), ("network", "sent", "net_tx_bps"))


@dataclass
class SystemSeries:
    """A read of a run's recorded resource samples, by chart (SYSTEM_CHARTS' keys)."""

    lines: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)  # line: (t, value)
    references: dict[str, dict[str, float]] = field(default_factory=dict)  # e.g. each GPU's memory size
    missing: dict[str, str] = field(default_factory=dict)  # why a chart has nothing to draw, in words
    last_t: float | None = None  # the newest sample read: the next read asks for what came after it
    samples: int = 0  # samples read (before a first read's bucketing)


def no_gpu_words(reason: str | None) -> str:
    """Why a run's GPU charts are empty, as the Monitor page says it: no GPU at all, or GPUs NVML cannot read."""
    reason = reason or "NVML lists none"
    if reason.startswith("GPU "):
        return f"NVML can read none of the GPUs. {reason}"
    return f"No NVIDIA GPU found: {reason.rstrip('.')}."


def read_system_series(store: RunStore, run_id: str, after: float | None = None, *, live: bool = False,
                       max_points: int = SYSTEM_POINTS) -> SystemSeries:
    """The run's recorded system figures as SYSTEM_CHARTS draw them: each GPU's utilisation and memory (the run's
    own GPUs where the recording tells them), the host's CPU, each rank's RSS with their sum, disk and network
    rates. A first read (`after` None) buckets the whole run into at most `max_points` points a line; a later
    one gives the samples recorded after `after`, whole. A line without a single figure is left out, and a chart
    left with none says why in `missing` (`live`: the run may still record it)."""
    from traindeck.backend.monitor.live import rank_lines
    from traindeck.backend.monitor.store_read import read_process_samples, read_series

    since = None if after is None else after + _AFTER
    points = max_points if after is None else None
    recorded = read_series(store.path, run_id, since=since, max_points=points)
    processes = read_process_samples(store.path, run_id, since=since, max_points=points)
    info = recorded["info"]
    out = SystemSeries(samples=int(info.get("samples") or 0))
    t = recorded["t"]
    # The newest sample itself, not its bucket's first: the next read starts after every sample this one covered.
    newest = [float(v) for v in (info.get("last_t"), processes[-1]["t"] if processes else None) if v is not None]
    out.last_t = max(newest) if newest else None

    def add(chart: str, line: str, x: np.ndarray, y: np.ndarray) -> None:
        if len(y) and np.isfinite(y).any():
            out.lines.setdefault(chart, {})[line] = (np.asarray(x, dtype=np.float64), np.asarray(y, np.float64))

    run_gpus = info.get("run_gpus")
    known = info.get("gpus") or ()
    own = {int(g["index"]) for g in known if not run_gpus or g.get("uuid") in run_gpus}
    for index, gpu in sorted(recorded["gpus"].items()):
        if index in own:
            add("gpu_util", f"GPU {index}", gpu["t"], gpu["util_pct"])
            add("gpu_memory", f"GPU {index}", gpu["t"], gpu["mem_used"])
            total = gpu["mem_total"]
            if len(total) and np.isfinite(total).any():
                sizes = out.references.setdefault("gpu_memory", {})
                sizes["GPU size"] = max(sizes.get("GPU size", 0.0), float(np.nanmax(total)))
    for name, line in rank_lines(processes).items():
        add("rank_rss", name, line["t"], line["rss"])
    for chart, name, column in _HOST_LINES:
        add(chart, name, t, recorded[column])

    if after is not None and not out.samples and not processes:
        return out  # nothing new: what is shown stands
    yet = " yet" if live else ""
    if not out.samples and after is None:
        words = ("No resource samples recorded for this run yet: its supervisor records them every second."
                 if live else "No resource samples were recorded for this run.")
        out.missing = {chart.key: words for chart in SYSTEM_CHARTS}
        return out
    if not known:
        words = no_gpu_words(info.get("gpu_error"))
        out.missing["gpu_util"] = out.missing["gpu_memory"] = words
    else:
        out.missing["gpu_util"] = f"NVML gave no utilisation of the run's GPUs{yet}."
        out.missing["gpu_memory"] = f"NVML gave no memory figure of the run's GPUs{yet}."
    out.missing["cpu"] = f"No host CPU figure recorded{yet}."
    out.missing["rank_rss"] = f"No rank processes recorded{yet}" + (
        ": the launcher has not started them." if live else ".")
    out.missing["disk"] = f"No disk figures recorded{yet}."
    out.missing["network"] = f"No network figures recorded{yet}."
    for key in out.lines:
        out.missing.pop(key, None)
    return out


def system_export_name(chart: str, line: str) -> str:
    """A system series' name in an export: "system/<chart key>/<line>", e.g. "system/gpu_util/GPU 0"."""
    return f"system/{chart}/{line}"


def read_system_table(store: RunStore, run_id: str, charts: Sequence[str] | None = None) -> MetricTable:
    """Every recorded sample of the run's system series (those SYSTEM_CHARTS draw, or only the charts keyed in
    `charts`; whole: not bucketed) as export rows (no step, wall time, value), each series named by
    system_export_name, in the charts' order."""
    read = read_system_series(store, run_id, max_points=0)
    table: MetricTable = {}
    for chart in SYSTEM_CHARTS:
        if charts is not None and chart.key not in charts:
            continue
        for line, (t, y) in read.lines.get(chart.key, {}).items():
            known = np.isfinite(y)
            table[system_export_name(chart.key, line)] = [
                (None, float(at), float(value)) for at, value in zip(t[known].tolist(), y[known].tolist(), strict=True)]
    return table
