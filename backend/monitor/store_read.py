"""Reading resource samples back from the run store (store.py's tables): a chart's series at the resolution it
needs (read_series: fresh rows, chunks, or the chunks' rollups, bucketed without a Python object per value), a run's
peaks and totals (resource_summary, for `runs show`, the diagnosis and History), and the per-process samples
(read_process_samples). Readers open the file read-only and never create a table."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from traindeck.backend.monitor.sample_store import (
    BATCH_SAMPLES,
    GPU_NAMES,
    PROCESS_FIELDS,
    ROLLUP_SAMPLES,
    SAMPLE_NAMES,
    _Layout,
    _open_for_reading,
    _rollup,
    _series,
)


class _Table:
    """Where one table's rows live: resource_samples (gpu -1) or one GPU's resource_gpu_samples, plus its chunks."""

    def __init__(self, conn: sqlite3.Connection, sid: int, gpu: int, names: tuple[str, ...], lower: float) -> None:
        self.conn, self.sid, self.gpu, self.names, self.lower = conn, sid, gpu, names, lower
        self.layout = _Layout.of(names)
        if gpu < 0:
            self._fresh_where = "FROM resource_samples WHERE series_id = ? AND t >= ?"
            self._fresh_params: tuple[Any, ...] = (sid, lower)
        else:
            self._fresh_where = "FROM resource_gpu_samples WHERE series_id = ? AND gpu = ? AND t >= ?"
            self._fresh_params = (sid, gpu, lower)
        self._chunk_where = "FROM resource_chunks WHERE series_id = ? AND gpu = ? AND t_last >= ?"

    def extent(self) -> tuple[int, float | None, float | None]:
        """(at most this many samples, first chunk start or fresh sample, last sample time)."""
        n, first, last = self.conn.execute(
            f"SELECT COALESCE(SUM(n), 0), MIN(t_first), MAX(t_last) {self._chunk_where}", (self.sid, self.gpu, self.lower)
        ).fetchone()
        fresh_n, fresh_first, fresh_last = self.conn.execute(
            f"SELECT COUNT(*), MIN(t), MAX(t) {self._fresh_where}", self._fresh_params
        ).fetchone()
        first = first if first is not None else fresh_first
        if first is not None:
            first = max(first, self.lower)
        return int(n) + int(fresh_n), first, fresh_last if fresh_last is not None else last

    def _chunk_values(self, columns: str, n: int, data: bytes) -> np.ndarray:
        stored = columns.split(",")
        values = np.frombuffer(data, dtype="<f8").reshape(len(stored), n)
        if tuple(stored) != self.names:  # written by another version: match by name, unknown columns stay NaN
            block = np.full((len(self.names), n), np.nan)
            for i, name in enumerate(self.names):
                if name in stored:
                    block[i] = values[stored.index(name)]
            values = block
        if values[0, 0] < self.lower:  # only the first chunk can start before `since`
            values = values[:, np.searchsorted(values[0], self.lower) :]
        return values

    def _fresh(self) -> np.ndarray | None:
        rows = self.conn.execute(f"SELECT {', '.join(self.names)} {self._fresh_where} ORDER BY t", self._fresh_params).fetchall()
        return np.array(rows, dtype=float).T if rows else None

    def blocks(self) -> Iterator[np.ndarray]:
        """(len(names), n) float blocks in time order: each chunk, then the fresh rows. A block may be a view of a
        blob: use it before asking for the next one."""
        # ORDER BY t_last walks the index (chunks never overlap); ordering by anything else would copy every blob
        # through a sorter.
        for columns, n, data in self.conn.execute(
            f"SELECT columns, n, data {self._chunk_where} ORDER BY t_last", (self.sid, self.gpu, self.lower)
        ):
            values = self._chunk_values(columns, n, data)
            if values.shape[1]:
                yield values
        fresh = self._fresh()
        if fresh is not None:
            yield fresh

    def rollups(self) -> Iterator[np.ndarray]:
        """Like `blocks` in the mergeable form of `_rollup`: chunks as their stored rollups (a tenth of the data),
        except a chunk that `since` cuts into or that another version wrote, which are rolled up sample by sample."""
        layout, names = self.layout, ",".join(self.names)
        for columns, n, t_first, rollup in self.conn.execute(
            f"SELECT columns, n, t_first, rollup {self._chunk_where} ORDER BY t_last", (self.sid, self.gpu, self.lower)
        ):
            if columns == names and t_first >= self.lower:
                yield np.frombuffer(rollup, dtype="<f8").reshape(layout.rows, -1)
                continue
            (data,) = self.conn.execute(
                "SELECT data FROM resource_chunks WHERE series_id = ? AND gpu = ? AND t_first = ?",
                (self.sid, self.gpu, t_first),
            ).fetchone()
            values = self._chunk_values(columns, n, data)
            if values.shape[1]:
                yield _rollup(values, layout, 1)
        fresh = self._fresh()
        if fresh is not None:
            yield _rollup(fresh, layout, 1)

    def read_all(self) -> np.ndarray:
        # Filled block by block into one array: holding every blob until a final concatenate would double the
        # memory touched, and fresh memory is what costs most here (page faults), not the copying.
        capacity = self.extent()[0]
        table = np.empty((len(self.names), capacity))
        filled = 0
        for block in self.blocks():
            table[:, filled : filled + block.shape[1]] = block
            filled += block.shape[1]
        return table[:, :filled]


def _batched(parts: Iterator[np.ndarray], rows: int, size: int = BATCH_SAMPLES) -> Iterator[np.ndarray]:
    """The parts regrouped into batches of up to `size` columns in one reused buffer: few numpy calls per day of
    samples, and memory bounded however long the run. Each batch is valid until the next is asked for."""
    buffer = np.empty((rows, size))
    filled = 0
    for part in parts:
        start = 0
        while start < part.shape[1]:
            take = min(size - filled, part.shape[1] - start)
            buffer[:, filled : filled + take] = part[:, start : start + take]
            filled += take
            start += take
            if filled == size:
                yield buffer
                filled = 0
    if filled:
        yield buffer[:, :filled]


class _Buckets:
    """Equal time buckets [t0 + k*width, t0 + (k+1)*width) filled from `_rollup`-form batches: MAX columns keep
    their peak, MIN columns their low, AVG columns their mean, all ignoring NaN; a bucket's time is its first
    sample's."""

    def __init__(self, layout: _Layout, t0: float, width: float, points: int) -> None:
        self.layout, self.t0, self.width, self.points = layout, t0, width, points
        k_max, k_min, k_avg = len(layout.maxes), len(layout.mins), len(layout.means)
        self.first_t = np.full(points, np.inf)
        self.samples = 0
        self.max_v = np.full((k_max, points), np.nan)
        self.min_v = np.full((k_min, points), np.nan)
        self.sums = np.zeros((k_avg, points))
        self.counts = np.zeros((k_avg, points))
        self._rows = (2, 2 + k_max, 2 + k_max + k_min, 2 + k_max + k_min + k_avg, layout.rows)

    def add(self, part: np.ndarray) -> None:
        t = part[0]
        bucket = np.clip(((t - self.t0) / self.width).astype(np.int64), 0, self.points - 1)
        starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
        ids = bucket[starts]  # strictly increasing within a part: fancy-index updates never collide
        self.first_t[ids] = np.minimum(self.first_t[ids], t[starts])
        self.samples += int(part[1].sum())
        a, b, c, d, e = self._rows
        with np.errstate(invalid="ignore"):
            if b > a:
                self.max_v[:, ids] = np.fmax(self.max_v[:, ids], np.fmax.reduceat(part[a:b], starts, axis=1))
            if c > b:
                self.min_v[:, ids] = np.fmin(self.min_v[:, ids], np.fmin.reduceat(part[b:c], starts, axis=1))
            if d > c:
                self.sums[:, ids] += np.add.reduceat(part[c:d], starts, axis=1)
                self.counts[:, ids] += np.add.reduceat(part[d:e], starts, axis=1)

    def result(self) -> np.ndarray:
        layout = self.layout
        used = np.isfinite(self.first_t)
        out = np.empty((len(layout.names), int(used.sum())))
        out[0] = self.first_t[used]
        out[layout.maxes] = self.max_v[:, used]
        out[layout.mins] = self.min_v[:, used]
        counts = self.counts[:, used]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[layout.means] = np.where(counts > 0, self.sums[:, used] / counts, np.nan)
        return out


def read_series(
    store_path: Path | str, run_id: str, since: float | None = None, max_points: int | None = None
) -> dict[str, Any]:
    """The charted series of a run as numpy float arrays (NaN where a value was unknown), oldest first.

    Keys: "t" and every column of `SAMPLE_COLUMNS` (host, GPU totals, run totals), "gpus": {index: {"t", and
    every column of `GPU_COLUMNS`}}, and "info" (the run's fixed facts: RAM size, GPU names, watched devices,
    "interval_s", "gpu_error"; and "samples", "first_t", "last_t" of the samples read, before downsampling). `since` keeps samples with t >= since (for live charts that append).
    `max_points` downsamples into at most that many equal time buckets, each keeping the peak of levels, the
    low of available RAM and the mean of rates; the GPU series use the same buckets, so all stay aligned. The
    buckets are filled chunk by chunk, so a chart of a long run never holds the whole run in memory. A run with
    nothing recorded gives empty arrays.
    """
    out: dict[str, Any] = {name: np.empty(0) for name in SAMPLE_NAMES}
    out["gpus"] = {}
    out["info"] = {}
    conn = _open_for_reading(store_path)
    if conn is None:
        return out
    try:
        series = _series(conn, run_id)
        if series is None:
            return out
        sid, info, gpu_error, interval_s = series
        lower = -np.inf if since is None else float(since)
        tables = {-1: _Table(conn, sid, -1, SAMPLE_NAMES, lower)}
        for g in info.get("gpus", ()):
            tables[int(g["index"])] = _Table(conn, sid, int(g["index"]), GPU_NAMES, lower)
        conn.execute("BEGIN")  # one snapshot: a chunk move in between must not show a sample twice or never
        try:
            count, first, last = tables[-1].extent()
            if max_points and count > max_points and first is not None and last is not None and last > first:
                points = int(max_points)
                width = (last - first) / points
                coarse = count / points >= ROLLUP_SAMPLES  # every bucket spans whole rollups: read only those
                results = {}
                for index, table in tables.items():
                    buckets = _Buckets(table.layout, first, width, points)
                    parts = table.rollups() if coarse else (_rollup(b, table.layout, 1) for b in table.blocks())
                    for batch in _batched(parts, table.layout.rows):
                        buckets.add(batch)
                    results[index] = buckets.result()
                    if index < 0:
                        count = buckets.samples
            else:
                results = {index: table.read_all() for index, table in tables.items()}
                count = results[-1].shape[1]
        finally:
            conn.rollback()
    finally:
        conn.close()
    main = results.pop(-1)
    out.update({name: main[i] for i, name in enumerate(SAMPLE_NAMES)})
    out["gpus"] = {i: {name: table[k] for k, name in enumerate(GPU_NAMES)} for i, table in results.items()}
    out["info"] = {**info, "gpu_error": gpu_error, "interval_s": interval_s, "samples": count,
                   "first_t": float(main[0, 0]) if main.shape[1] else None, "last_t": last}
    return out


def _peak(values: np.ndarray, low: bool = False) -> float | int | None:
    if values.size == 0 or np.all(np.isnan(values)):
        return None
    value = float(np.nanmin(values) if low else np.nanmax(values))
    return int(value) if value.is_integer() else value


class ResourceSummary(TypedDict):
    """What resource_summary returns (and `runs show --json` prints under "resources"); None: not recorded."""

    samples: int
    first_t: float | None
    last_t: float | None
    interval_s: float | None
    peak_rank_rss_bytes: float | None
    peak_ranks_rss_bytes: float | None
    peak_ranks_locked_bytes: float | None
    peak_tree_rss_bytes: float | None
    mean_ranks_cpu_percent: float | None
    peak_gpu_mem_bytes: float | None
    peak_run_gpu_mem_bytes: float | None
    peak_host_used_bytes: float | None
    min_host_available_bytes: float | None
    peak_swap_used_bytes: float | None
    ram_total_bytes: int | None
    gpu_count: int
    gpu_error: str | None
    gpu_versions: dict[str, Any]
    run_gpus: list[str] | None  # None: which GPUs the run used could not be told
    pcie_source: str | None


def resource_summary(store_path: Path | str, run_id: str) -> ResourceSummary:
    """Counts and peaks over the whole run, for `traindeck runs show ID --json` (`resources`) and run history.

    Always has `samples` (0 when nothing was recorded), `peak_rank_rss_bytes` (the largest single rank),
    `peak_gpu_mem_bytes` (the fullest single GPU; None without GPUs), `peak_host_used_bytes`; also first/last
    sample times, the ranks' summed and locked memory peaks, the run's GPU memory peak, the ranks' mean CPU %,
    the lowest available RAM, swap, RAM size, GPU count and why GPUs could not be read. Read from the chunks'
    rollups (peaks and lows are exact there), so a summary of a long run costs little.
    """
    whole = read_series(store_path, run_id, max_points=1)
    info = whole["info"]
    run_gpus = info.get("run_gpus")
    indexes = ({g["index"] for g in info.get("gpus", ()) if g.get("uuid") in run_gpus} if run_gpus
               else set(whole["gpus"]))
    gpus = [table for index, table in whole["gpus"].items() if index in indexes]  # only the run's own GPUs
    return {
        "samples": int(info.get("samples", 0)),
        "first_t": info.get("first_t"),
        "last_t": info.get("last_t"),
        "interval_s": info.get("interval_s"),
        "peak_rank_rss_bytes": _peak(whole["rank_rss_max"]),
        "peak_ranks_rss_bytes": _peak(whole["ranks_rss"]),
        "peak_ranks_locked_bytes": _peak(whole["ranks_locked"]),
        "peak_tree_rss_bytes": _peak(whole["tree_rss"]),
        "mean_ranks_cpu_percent": _peak(whole["ranks_cpu_pct"]),  # an AVG column: one bucket holds the mean
        "peak_gpu_mem_bytes": max((p for g in gpus if (p := _peak(g["mem_used"])) is not None), default=None),
        "peak_run_gpu_mem_bytes": _peak(whole["ranks_gpu_mem"]),
        "peak_host_used_bytes": _peak(whole["ram_used"]),
        "min_host_available_bytes": _peak(whole["ram_available"], low=True),
        "peak_swap_used_bytes": _peak(whole["swap_used"]),
        "ram_total_bytes": info.get("ram_total_bytes"),
        "gpu_count": len(info.get("gpus", ())),
        "gpu_error": info.get("gpu_error"),
        "gpu_versions": info.get("gpu_versions") or {},
        "run_gpus": run_gpus,  # None: which GPUs the run used could not be told; the GPU peaks cover them all
        "pcie_source": info.get("pcie_source"),
    }


def read_process_samples(
    store_path: Path | str, run_id: str, since: float | None = None, limit: int | None = None,
    max_points: int | None = None, until: float | None = None,
) -> list[dict[str, Any]]:
    """Per-process details of the run's samples from `since` up to `until` (both included where given), oldest
    first (the last `limit` ones when given; with `max_points`, the first sample of each of at most that many equal
    time buckets, so that a day of samples charts as a few thousand: only those are decoded).

    Each item: {"t", "root_pid", "cores": [per-core CPU %], "processes": [{pid, name, cmdline, role, rank,
    local_rank, cpu_percent, rss_bytes, locked_bytes, read_bytes, write_bytes, gpu_memory_bytes}]}.
    """
    conn = _open_for_reading(store_path)
    if conn is None:
        return []
    try:
        series = _series(conn, run_id)
        if series is None:
            return []
        sid = series[0]
        lower = -1e300 if since is None else float(since)
        upper = 1e300 if until is None else float(until)
        first: float | None = None
        last: float | None = None
        count = 0
        if max_points:
            first, last, count = conn.execute(
                "SELECT MIN(t), MAX(t), COUNT(*) FROM resource_sample_processes WHERE series_id = ? AND t >= ? AND t <= ?",
                (sid, lower, upper)).fetchone()
        if max_points and count > max_points and first is not None and last is not None and last > first:
            # SQLite gives a MIN() aggregate's row its other columns: each bucket's first sample, whole.
            rows = conn.execute(
                "SELECT MIN(t), processes FROM resource_sample_processes WHERE series_id = ? AND t >= ? AND t <= ? "
                "GROUP BY CAST((t - ?) / ? AS INTEGER) ORDER BY 1",
                (sid, lower, upper, first, (last - first) / int(max_points) * (1 + 1e-9)),
            ).fetchall()
        elif limit is None:
            rows = conn.execute(
                "SELECT t, processes FROM resource_sample_processes WHERE series_id = ? AND t >= ? AND t <= ? ORDER BY t",
                (sid, lower, upper),
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT t, processes FROM resource_sample_processes WHERE series_id = ? AND t >= ? AND t <= ? ORDER BY t DESC LIMIT ?",
                (sid, lower, upper, int(limit)),
            ).fetchall()[::-1]
        static = {
            int(r[0]): {"name": r[1], "cmdline": r[2], "role": r[3], "rank": r[4], "local_rank": r[5]}
            for r in conn.execute(
                "SELECT pid, name, cmdline, role, rank, local_rank FROM resource_processes WHERE series_id = ?", (sid,)
            )
        }
    finally:
        conn.close()
    out = []
    for t, blob in rows:
        details = json.loads(blob)
        processes = []
        for values in details.get("processes", ()):
            entry = dict(zip(PROCESS_FIELDS, values, strict=False))
            processes.append({**static.get(int(entry["pid"]), {}), **entry})
        out.append({"t": t, "root_pid": details.get("root_pid"), "cores": details.get("cores", []), "processes": processes})
    return out


def read_gpu_health(store_path: Path | str, run_id: str) -> list[tuple[int, float, dict[str, Any]]]:
    """The run's GPU health changes, oldest first: (GPU index, time, GpuHealth as a dict with "util")."""
    conn = _open_for_reading(store_path)
    if conn is None:
        return []
    try:
        series = _series(conn, run_id)
        if series is None:
            return []
        try:
            rows = conn.execute("SELECT gpu, t, health FROM resource_gpu_health WHERE series_id = ? ORDER BY t",
                                (series[0],)).fetchall()
        except sqlite3.OperationalError:  # a store written before health was recorded
            return []
        return [(int(gpu), float(t), json.loads(text)) for gpu, t, text in rows]
    finally:
        conn.close()


def read_gpu_bus_ids(store_path: Path | str, run_id: str) -> dict[int, str | None]:
    """{GPU index: NVML's PCI bus id} of the GPUs the run's recorder saw ({} before it wrote its first sample)."""
    conn = _open_for_reading(store_path)
    if conn is None:
        return {}
    try:
        series = _series(conn, run_id)
    finally:
        conn.close()
    if series is None:
        return {}
    return {int(g["index"]): g.get("pci_bus_id") for g in series[1].get("gpus", ()) if isinstance(g, dict)}
