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

The readers (read_series, resource_summary, read_process_samples) are in store_read.py; this module keeps the schema,
the writer and the layout and rollup they share.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from traindeck.backend.core.fileio import refuse_linked_database
from traindeck.backend.monitor.snapshots import BUSY_PERCENT, GpuHealth, ResourceSample

BUSY_TIMEOUT_MS = 5000
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})

logger = logging.getLogger(__name__)


def _file_id(path: Path) -> tuple[int, int] | None:
    """The store file's identity (device, inode), or None while there is none at `path`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino

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
CREATE TABLE IF NOT EXISTS resource_gpu_health (  -- a row when a GPU's health changes (gpu_health.py), not per sample
  series_id INTEGER NOT NULL,
  gpu INTEGER NOT NULL,
  t REAL NOT NULL,
  health TEXT NOT NULL,  -- GpuHealth as JSON, with the GPU's utilisation then ("util")
  PRIMARY KEY (series_id, gpu, t)
) WITHOUT ROWID;
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
    refuse_linked_database(path)
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
    refuse_linked_database(path)  # a reader creates the -shm file SQLite keeps beside a WAL store
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
        self._series_row = (interval_s, started_at)
        self._unreadable: str | None = None  # why writes stopped: the store file SQLite refuses, until it is replaced
        self._open()
        self._insert_sample = (
            f"INSERT OR REPLACE INTO resource_samples (series_id, t, {', '.join(c for c, _, _ in SAMPLE_COLUMNS)}) "
            f"VALUES ({', '.join('?' * (len(SAMPLE_COLUMNS) + 2))})"
        )
        self._insert_gpu = (
            f"INSERT OR REPLACE INTO resource_gpu_samples (series_id, gpu, t, {', '.join(c for c, _, _ in GPU_COLUMNS)}) "
            f"VALUES ({', '.join('?' * (len(GPU_COLUMNS) + 3))})"
        )

    def _open(self) -> None:
        """Connect to the store file now at `store_path` and find (or add) this run's series in it."""
        interval_s, started_at = self._series_row
        self.conn = connect(self.store_path)
        self._file = _file_id(self.store_path)
        with self.conn:
            self.conn.execute(
                "INSERT OR IGNORE INTO resource_series (run_id, started_at, interval_s) VALUES (?, ?, ?)",
                (self.run_id, started_at, interval_s),
            )
        found = _series(self.conn, self.run_id)
        assert found is not None
        self.series_id = found[0]
        self._info_written = False
        self._info_run_gpus: tuple[str, ...] | None = None
        self._known_pids: set[int] = set()
        self._health_said: dict[int, str] = {}  # the last health row written per GPU (rows are written on change)
        self._gpu_indexes: set[int] = {
            int(r[0]) for r in self.conn.execute(
                "SELECT DISTINCT gpu FROM resource_gpu_samples WHERE series_id = ?", (self.series_id,)
            )
        }
        self._fresh_rows = int(
            self.conn.execute("SELECT COUNT(*) FROM resource_samples WHERE series_id = ?", (self.series_id,)).fetchone()[0]
        )

    def close(self) -> None:
        self.conn.close()

    def _current(self) -> bool:
        """Whether a sample can be written now. The run store can be replaced under a long-running writer (a
        corrupt or emptied store is moved aside and rebuilt by whoever opens it next): the writer then reconnects
        to the new file, since its old connection would write into the file kept aside. A file SQLite refuses is
        said once (by write) and skipped until it is replaced."""
        now = _file_id(self.store_path)
        if now is None:
            return False  # between the rebuild's two renames, or removed: the next sample looks again
        if now != self._file:
            self.conn.close()
            try:
                self._open()
            except sqlite3.DatabaseError as exc:
                self._file, self._unreadable = now, str(exc)
                return False
            self._unreadable = None
            logger.info("the run store was replaced: resource samples go on in the new %s", self.store_path)
        return self._unreadable is None

    def commit(self) -> None:
        self.conn.commit()

    def write(self, sample: ResourceSample, *, commit: bool = True) -> None:
        if not self._current():
            return
        try:
            self._write(sample, commit=commit)
        except sqlite3.DatabaseError as exc:
            if exc.sqlite_errorcode not in _CORRUPT_CODES:
                raise
            self._unreadable = str(exc)
            logger.warning("resource samples are not written while the run store %s is unreadable (%s): they go "
                           "on once it is rebuilt", self.store_path, exc)

    def _write(self, sample: ResourceSample, *, commit: bool) -> None:
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
        for gpu in gpus:
            if gpu.health is not None:
                self._write_health(sid, gpu.index, t, gpu.health, gpu.utilization_percent)
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

    def _write_health(self, sid: int, gpu: int, t: float, health: GpuHealth, util: float | None) -> None:
        """A row when what matters of the GPU's health changes: its throttling, its link (and whether the GPU is
        busy, which decides whether a slow link counts), replays, ECC, XIDs."""
        state = dataclasses.asdict(health)
        busy = (util or 0) >= BUSY_PERCENT
        key = json.dumps([state, busy], sort_keys=True)
        if self._health_said.get(gpu) == key:
            return
        self._health_said[gpu] = key
        self.conn.execute("INSERT OR REPLACE INTO resource_gpu_health VALUES (?, ?, ?, ?)",
                          (sid, gpu, t, json.dumps({**state, "util": util}, separators=(",", ":"))))

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
                    "pci_bus_id": g.pci_bus_id,  # names the GPU of an XID line in the kernel log
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


def _pcie_source(gpus: Any) -> str | None:
    sources = {g.pcie_source for g in gpus if g.pcie_source is not None}
    if not sources:
        return None
    return "counter" if sources == {"counter"} else "sampled"
