"""Resource samples in the run store (SQLite, WAL): the monitor's own tables, written once a second for days.

Layout, chosen so that charting a day of 1 Hz samples reads in well under 200 ms:
- `resource_series`: one row per recorded run (run_id -> series_id) with what does not change during the run
  (RAM size, GPU names and memory sizes, the watched NVMe paths and their devices, why GPUs were unreadable).
- `resource_samples`: one narrow row per fresh sample, only numbers, keyed (series_id, t): host CPU/RAM/swap/
  disk/network, GPU totals and the run's totals. `resource_gpu_samples`: the same per GPU, keyed (series_id, gpu, t).
- `resource_chunks`: every `CHUNK_SAMPLES` samples, the writer moves the oldest fresh rows into one chunk row per
  table (and per GPU): the columns as float64 arrays, column after column, in one blob. Reading a day is then
  ~150 blob reads turned into arrays without a Python object per value (a row per value costs seconds on a small
  machine), plus the few fresh rows. The move is one transaction, so a reader sees each sample exactly once.
- `resource_sample_processes`: a compact JSON array per sample with each process's numbers
  ([pid, cpu %, RSS, locked, read bytes, write bytes, GPU bytes]) and per-core CPU; kept apart so that the
  charted tables stay small, and `resource_processes` with what does not change per process (name, cmdline,
  role, rank).

Other tables in the same file belong to the run supervisor; this module creates and touches only its own.

Size (~775 lines): the resource store's schema, writer, rollups and readers share one table layout; split
candidate: the readers (read_series, resource_summary) into their own module.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from traindeck.backend.monitor.snapshots import ResourceSample

BUSY_TIMEOUT_MS = 5000

# (column, SQL type, how to merge a bucket when downsampling). Levels keep their peak (memory spikes are what
# kill runs), availability keeps its low, rates and percentages keep their mean (so bytes = mean rate x time).
SAMPLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("cpu_pct", "REAL", "AVG"),
    ("ram_used", "INTEGER", "MAX"),
    ("ram_available", "INTEGER", "MIN"),
    ("swap_used", "INTEGER", "MAX"),
    ("disk_read_bps", "REAL", "AVG"),
    ("disk_write_bps", "REAL", "AVG"),
    ("nvme_read_bps", "REAL", "AVG"),
    ("nvme_write_bps", "REAL", "AVG"),
    ("net_rx_bps", "REAL", "AVG"),
    ("net_tx_bps", "REAL", "AVG"),
    ("gpu_util_pct", "REAL", "AVG"),
    ("gpu_mem_used", "INTEGER", "MAX"),
    ("pcie_h2d_bps", "REAL", "AVG"),
    ("pcie_d2h_bps", "REAL", "AVG"),
    ("rank_count", "INTEGER", "MAX"),
    ("ranks_rss", "INTEGER", "MAX"),
    ("rank_rss_max", "INTEGER", "MAX"),
    ("ranks_cpu_pct", "REAL", "AVG"),
    ("ranks_locked", "INTEGER", "MAX"),
    ("ranks_gpu_mem", "INTEGER", "MAX"),
    ("tree_rss", "INTEGER", "MAX"),
)
GPU_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("util_pct", "REAL", "AVG"),
    ("mem_used", "INTEGER", "MAX"),
    ("mem_total", "INTEGER", "MAX"),
    ("power_w", "REAL", "AVG"),
    ("temp_c", "REAL", "MAX"),
    ("sm_clock_mhz", "INTEGER", "AVG"),
    ("pcie_h2d_bps", "REAL", "AVG"),
    ("pcie_d2h_bps", "REAL", "AVG"),
    ("run_mem", "INTEGER", "MAX"),
)
SAMPLE_NAMES = ("t",) + tuple(c for c, _, _ in SAMPLE_COLUMNS)
GPU_NAMES = ("t",) + tuple(c for c, _, _ in GPU_COLUMNS)
CHUNK_SAMPLES = 600  # 10 minutes at 1 Hz: ~115 KB a chunk, 144 chunks a day
BATCH_SAMPLES = 32768  # samples downsampled per numpy pass when reading for a chart
ROLLUP_SAMPLES = 10  # a chart whose buckets hold at least this many samples reads the chunks' rollups only
PROCESS_FIELDS = ("pid", "cpu_percent", "rss_bytes", "locked_bytes", "read_bytes", "write_bytes", "gpu_memory_bytes")


def _schema() -> str:
    sample_cols = ",\n  ".join(f"{name} {kind}" for name, kind, _ in SAMPLE_COLUMNS)
    gpu_cols = ",\n  ".join(f"{name} {kind}" for name, kind, _ in GPU_COLUMNS)
    return f"""
CREATE TABLE IF NOT EXISTS resource_series (
  series_id INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL UNIQUE,
  started_at REAL NOT NULL,
  interval_s REAL NOT NULL,
  info TEXT NOT NULL DEFAULT '{{}}',
  gpu_error TEXT
);
CREATE TABLE IF NOT EXISTS resource_samples (
  series_id INTEGER NOT NULL,
  t REAL NOT NULL,
  {sample_cols},
  PRIMARY KEY (series_id, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS resource_gpu_samples (
  series_id INTEGER NOT NULL,
  gpu INTEGER NOT NULL,
  t REAL NOT NULL,
  {gpu_cols},
  PRIMARY KEY (series_id, gpu, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS resource_chunks (
  chunk_id INTEGER PRIMARY KEY,
  series_id INTEGER NOT NULL,
  gpu INTEGER NOT NULL,  -- -1: resource_samples' columns; otherwise that GPU's resource_gpu_samples columns
  t_first REAL NOT NULL,
  t_last REAL NOT NULL,
  n INTEGER NOT NULL,
  columns TEXT NOT NULL,  -- names in blob order, "t" first: older chunks stay readable when columns are added
  rollup BLOB NOT NULL,  -- the chunk summarised every ROLLUP_SAMPLES samples (see _rollup); before `data`, so
                         -- reading it never walks data's overflow pages
  data BLOB NOT NULL  -- little-endian float64, n values per column, NaN for unknown
);
CREATE INDEX IF NOT EXISTS resource_chunks_by_series ON resource_chunks (series_id, gpu, t_last);
CREATE TABLE IF NOT EXISTS resource_sample_processes (
  series_id INTEGER NOT NULL,
  t REAL NOT NULL,
  processes TEXT NOT NULL,
  PRIMARY KEY (series_id, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS resource_processes (
  series_id INTEGER NOT NULL,
  pid INTEGER NOT NULL,
  first_t REAL NOT NULL,
  name TEXT,
  cmdline TEXT,
  role TEXT,
  rank INTEGER,
  local_rank INTEGER,
  PRIMARY KEY (series_id, pid)
) WITHOUT ROWID;
"""


def connect(store_path: Path | str) -> sqlite3.Connection:
    """A connection to the run store for writing: WAL (readers never block the writer), a busy timeout for the
    moments another writer holds the lock, and synchronous=NORMAL (a power cut may lose the last samples, never
    the file)."""
    path = Path(store_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(_schema())
    return conn


def _open_for_reading(store_path: Path | str) -> sqlite3.Connection | None:
    """A connection for reading, or None when there is no store yet (reading must never create one)."""
    path = Path(store_path)
    if not path.exists():
        return None
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # Chunk blobs span many overflow pages; reading them through a memory map is several times cheaper.
    conn.execute("PRAGMA mmap_size=268435456")
    return conn


def _series(conn: sqlite3.Connection, run_id: str) -> tuple[int, dict[str, Any], str | None, float] | None:
    try:
        row = conn.execute(
            "SELECT series_id, info, gpu_error, interval_s FROM resource_series WHERE run_id = ?", (run_id,)
        ).fetchone()
    except sqlite3.OperationalError:  # no such table: nothing was ever recorded in this store
        return None
    if row is None:
        return None
    return int(row[0]), json.loads(row[1] or "{}"), row[2], float(row[3])


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _total(values: Iterable[float | int | None]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


class ResourceWriter:
    """Writes `ResourceSample`s of one run into the run store (one transaction per sample by default)."""

    def __init__(self, store_path: Path | str, run_id: str, *, interval_s: float, started_at: float) -> None:
        self.store_path = Path(store_path)
        self.run_id = run_id
        self.conn = connect(self.store_path)
        with self.conn:
            self.conn.execute(
                "INSERT OR IGNORE INTO resource_series (run_id, started_at, interval_s) VALUES (?, ?, ?)",
                (run_id, started_at, interval_s),
            )
        found = _series(self.conn, run_id)
        assert found is not None
        self.series_id = found[0]
        self._info_written = False
        self._info_run_gpus: tuple[str, ...] | None = None
        self._known_pids: set[int] = set()
        self._gpu_indexes: set[int] = {
            int(r[0]) for r in self.conn.execute(
                "SELECT DISTINCT gpu FROM resource_gpu_samples WHERE series_id = ?", (self.series_id,)
            )
        }
        self._fresh_rows = int(
            self.conn.execute("SELECT COUNT(*) FROM resource_samples WHERE series_id = ?", (self.series_id,)).fetchone()[0]
        )
        self._insert_sample = (
            f"INSERT OR REPLACE INTO resource_samples (series_id, t, {', '.join(c for c, _, _ in SAMPLE_COLUMNS)}) "
            f"VALUES ({', '.join('?' * (len(SAMPLE_COLUMNS) + 2))})"
        )
        self._insert_gpu = (
            f"INSERT OR REPLACE INTO resource_gpu_samples (series_id, gpu, t, {', '.join(c for c, _, _ in GPU_COLUMNS)}) "
            f"VALUES ({', '.join('?' * (len(GPU_COLUMNS) + 3))})"
        )

    def close(self) -> None:
        self.conn.close()

    def commit(self) -> None:
        self.conn.commit()

    def write(self, sample: ResourceSample, *, commit: bool = True) -> None:
        if not self._info_written:
            self._write_info(sample)
        conn, sid, t = self.conn, self.series_id, sample.t
        host, run, gpus = sample.host, sample.run, sample.gpus
        watched = {dev for _, dev in host.watched_devices}
        nvme = [d for d in host.disks if d.device in watched]
        run_pids = {p.pid for p in run.processes} if run is not None else set()
        ranks = run.ranks if run is not None else ()
        if sample.run_gpus != self._info_run_gpus and sample.run_gpus is not None:
            self._write_info(sample)  # the run's GPUs became known (or changed): totals below count only those
        counted = [g for g in gpus if g.uuid in sample.run_gpus] if sample.run_gpus else list(gpus)
        conn.execute(
            self._insert_sample,
            (
                sid,
                t,
                host.cpu_percent,
                host.ram_used_bytes,
                host.ram_available_bytes,
                host.swap_used_bytes,
                host.disk_read_bytes_per_s,
                host.disk_write_bytes_per_s,
                sum(d.read_bytes_per_s for d in nvme) if nvme else None,
                sum(d.write_bytes_per_s for d in nvme) if nvme else None,
                host.net_rx_bytes_per_s,
                host.net_tx_bytes_per_s,
                _mean(g.utilization_percent for g in counted),
                _total(g.memory_used_bytes for g in counted),
                _total(g.pcie_h2d_bytes_per_s for g in counted),
                _total(g.pcie_d2h_bytes_per_s for g in counted),
                len(ranks),
                run.ranks_rss_bytes if run is not None and ranks else None,
                run.max_rank_rss_bytes if run is not None else None,
                run.ranks_cpu_percent if run is not None and ranks else None,
                run.ranks_locked_bytes if run is not None else None,
                run.ranks_gpu_memory_bytes if run is not None else None,
                run.tree_rss_bytes if run is not None and run.processes else None,
            ),
        )
        for gpu in gpus:
            trusted = run_pids and gpu.processes_unknown is None  # host PIDs in a container are not ours
            run_mem = _total(p.used_memory_bytes for p in gpu.processes if p.pid in run_pids) if trusted else None
            conn.execute(
                self._insert_gpu,
                (
                    sid,
                    gpu.index,
                    t,
                    gpu.utilization_percent,
                    gpu.memory_used_bytes,
                    gpu.memory_total_bytes,
                    gpu.power_w,
                    gpu.temperature_c,
                    gpu.sm_clock_mhz,
                    gpu.pcie_h2d_bytes_per_s,
                    gpu.pcie_d2h_bytes_per_s,
                    run_mem,
                ),
            )
        details: dict[str, Any] = {"cores": [round(c) for c in host.per_core_percent]}
        if run is not None:
            new = [p for p in run.processes if p.pid not in self._known_pids]
            if new:
                conn.executemany(
                    "INSERT OR REPLACE INTO resource_processes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(sid, p.pid, t, p.name, p.cmdline, p.role, p.rank, p.local_rank) for p in new],
                )
                self._known_pids.update(p.pid for p in new)
            details["root_pid"] = run.root_pid
            details["processes"] = [
                [
                    p.pid,
                    None if p.cpu_percent is None else round(p.cpu_percent, 1),
                    p.rss_bytes,
                    p.locked_bytes,
                    p.read_bytes,
                    p.write_bytes,
                    p.gpu_memory_bytes,
                ]
                for p in run.processes
            ]
        conn.execute(
            "INSERT OR REPLACE INTO resource_sample_processes VALUES (?, ?, ?)",
            (sid, t, json.dumps(details, separators=(",", ":"))),
        )
        self._gpu_indexes.update(g.index for g in gpus)
        self._fresh_rows += 1
        if self._fresh_rows >= CHUNK_SAMPLES:
            self._move_to_chunks()
        if commit:
            conn.commit()

    def _move_to_chunks(self) -> None:
        """Turn the oldest CHUNK_SAMPLES fresh rows (and the GPU rows up to the same time) into chunk rows."""
        conn, sid = self.conn, self.series_id
        rows = conn.execute(
            f"SELECT {', '.join(SAMPLE_NAMES)} FROM resource_samples WHERE series_id = ? ORDER BY t LIMIT ?",
            (sid, CHUNK_SAMPLES),
        ).fetchall()
        if not rows:
            self._fresh_rows = 0
            return
        t_last = rows[-1][0]
        self._insert_chunk(-1, SAMPLE_NAMES, rows)
        conn.execute("DELETE FROM resource_samples WHERE series_id = ? AND t <= ?", (sid, t_last))
        for gpu in sorted(self._gpu_indexes):
            gpu_rows = conn.execute(
                f"SELECT {', '.join(GPU_NAMES)} FROM resource_gpu_samples WHERE series_id = ? AND gpu = ? AND t <= ? "
                "ORDER BY t",
                (sid, gpu, t_last),
            ).fetchall()
            if gpu_rows:
                self._insert_chunk(gpu, GPU_NAMES, gpu_rows)
                conn.execute("DELETE FROM resource_gpu_samples WHERE series_id = ? AND gpu = ? AND t <= ?", (sid, gpu, t_last))
        self._fresh_rows = max(0, self._fresh_rows - len(rows))

    def _insert_chunk(self, gpu: int, names: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        columns = np.ascontiguousarray(np.array(rows, dtype="<f8").T)  # None -> NaN
        rollup = _rollup(columns, _Layout.of(names), ROLLUP_SAMPLES)
        self.conn.execute(
            "INSERT INTO resource_chunks (series_id, gpu, t_first, t_last, n, columns, rollup, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (self.series_id, gpu, rows[0][0], rows[-1][0], len(rows), ",".join(names),
             rollup.astype("<f8").tobytes(), columns.tobytes()),
        )

    def _write_info(self, sample: ResourceSample) -> None:
        host = sample.host
        info = {
            "cpu_count": len(host.per_core_percent),
            "ram_total_bytes": host.ram_total_bytes,
            "swap_total_bytes": host.swap_total_bytes,
            "watched_devices": [list(pair) for pair in host.watched_devices],
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "uuid": g.uuid,
                    "memory_total_bytes": g.memory_total_bytes,
                    "power_limit_w": g.power_limit_w,
                    "error": g.error,
                    "processes_unknown": g.processes_unknown,
                }
                for g in sample.gpus
            ],
            "process_fields": list(PROCESS_FIELDS),
            # Driver, CUDA (the driver's) and NVML versions: what a GPU reading depends on.
            "gpu_versions": dict(sample.gpu_versions),
            # UUIDs of the GPUs the run uses; absent or null: it could not be told, and totals cover every GPU.
            "run_gpus": None if sample.run_gpus is None else list(sample.run_gpus),
            # "counter": PCIe bytes from NVML's cumulative counters; "sampled": a 20 ms window, an estimate.
            "pcie_source": _pcie_source(sample.gpus),
        }
        self._info_run_gpus = sample.run_gpus
        self.conn.execute(
            "UPDATE resource_series SET info = ?, gpu_error = ? WHERE series_id = ?",
            (json.dumps(info), sample.gpu_error, self.series_id),
        )
        self._info_written = True


class _Layout:
    """Which columns of a table merge by MAX, MIN and AVG (row indexes, "t" being row 0)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        how = {name: agg for name, _, agg in SAMPLE_COLUMNS + GPU_COLUMNS}
        self.names = names
        self.maxes = [i for i, n in enumerate(names) if how.get(n) == "MAX"]
        self.mins = [i for i, n in enumerate(names) if how.get(n) == "MIN"]
        self.means = [i for i, n in enumerate(names) if how.get(n) == "AVG"]
        self.rows = 2 + len(self.maxes) + len(self.mins) + 2 * len(self.means)

    _cache: dict[tuple[str, ...], _Layout] = {}

    @classmethod
    def of(cls, names: tuple[str, ...]) -> _Layout:
        if names not in cls._cache:
            cls._cache[names] = cls(names)
        return cls._cache[names]


def _rollup(values: np.ndarray, layout: _Layout, every: int) -> np.ndarray:
    """Samples (len(names), n) summarised every `every` samples: rows are first t, sample count, the MAX columns'
    peaks, the MIN columns' lows, then the AVG columns' sums and counts of known values (so means merge exactly).
    With every=1 it is the same samples in the mergeable form."""
    n = values.shape[1]
    starts = np.arange(0, n, every)
    out = np.empty((layout.rows, starts.size))
    out[0] = values[0, starts]
    out[1] = np.diff(np.append(starts, n))
    row = 2
    with np.errstate(invalid="ignore"):
        if layout.maxes:
            out[row : row + len(layout.maxes)] = (
                values[layout.maxes] if every == 1 else np.fmax.reduceat(values[layout.maxes], starts, axis=1)
            )
            row += len(layout.maxes)
        if layout.mins:
            out[row : row + len(layout.mins)] = (
                values[layout.mins] if every == 1 else np.fmin.reduceat(values[layout.mins], starts, axis=1)
            )
            row += len(layout.mins)
        if layout.means:
            means = values[layout.means]
            known = ~np.isnan(means)
            sums = np.where(known, means, 0.0)
            k = len(layout.means)
            out[row : row + k] = sums if every == 1 else np.add.reduceat(sums, starts, axis=1)
            out[row + k : row + 2 * k] = known if every == 1 else np.add.reduceat(known, starts, axis=1)
    return out


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


def _pcie_source(gpus: Any) -> str | None:
    sources = {g.pcie_source for g in gpus if g.pcie_source is not None}
    if not sources:
        return None
    return "counter" if sources == {"counter"} else "sampled"


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
    store_path: Path | str, run_id: str, since: float | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Per-process details of the run's samples, oldest first (the last `limit` ones when given).

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
        if limit is None:
            rows = conn.execute(
                "SELECT t, processes FROM resource_sample_processes WHERE series_id = ? AND t >= ? ORDER BY t",
                (sid, lower),
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT t, processes FROM resource_sample_processes WHERE series_id = ? AND t >= ? ORDER BY t DESC LIMIT ?",
                (sid, lower, int(limit)),
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
